/*
 * standin.c: a CPU stand-in for NVIDIA's CUDA driver library (libcuda.so.1).
 *
 * A test double, not a simulator: it lets CI machines without a GPU run driver-API
 * programs (and an LD_PRELOAD interposer in front of them). Everything runs on the
 * calling thread: launches and copies finish before they return, but device-to-device
 * async copies, which a real GPU's copy engines run while the host goes on, are queued
 * and run together at the next synchronize (or before any call that could see or change
 * their memory), so several are in flight at once as on a GPU. Streams and modules are
 * tokens; every synchronize waits for every queued copy, which a real driver may also
 * have finished by then.
 *
 * Memory. Device pointers are real addresses of this process. cuMemAddressReserve
 * reserves address space (PROT_NONE); cuMemCreate makes a memfd, so one handle can be
 * mapped at several addresses and show the same bytes; cuMemMap maps it MAP_SHARED at
 * the address (still PROT_NONE); cuMemSetAccess makes it readable/writable; cuMemUnmap
 * puts a PROT_NONE reservation back. cuMemAlloc_v2 is create + reserve + map + access.
 * Every device range that a copy, memset or kernel touches is checked against the
 * table of mappings first, so a bad address is an error code, never a segfault.
 *
 * VRAM. Handles on a device (location DEVICE, cuMemAlloc_v2's included, on the current
 * context's device) are charged against that device's capacity, shared by every process
 * using the stand-in, as one GPU's memory is: a POSIX shared-memory table of (pid, bytes)
 * slots under flock() per device. Slots of dead processes are cleared whenever the table
 * is used, so a killed process frees its part. GPUSWAP_STANDIN_DEVICES devices (default
 * 1) each have their own UUID, capacity, table and primary context.
 *
 * Threads: one global mutex serializes every call; the current context is per thread.
 * Environment: GPUSWAP_STANDIN_VRAM, GPUSWAP_STANDIN_SHM, GPUSWAP_STANDIN_COPY_DELAY_MS,
 * GPUSWAP_STANDIN_REMOTE_NS, GPUSWAP_STANDIN_TIME_SLICE, GPUSWAP_STANDIN_UUID,
 * GPUSWAP_STANDIN_DEVICES (see README.md).
 */
#define _GNU_SOURCE
#include <ctype.h>
#include <dirent.h>
#include <dlfcn.h>
#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <signal.h>
#include <stddef.h>
#include <stdio.h>
#include <string.h>
#include <sys/file.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "cuda_subset.h"
#include "gpuswap_common.h"

#define API __attribute__((visibility("default")))
#define GRANULARITY ((size_t)2 << 20)
#define SHM_SLOTS 256
#define DEVICES_MAX 8
#define RO CU_MEM_ACCESS_FLAGS_PROT_READ
#define RW CU_MEM_ACCESS_FLAGS_PROT_READWRITE

_Static_assert(sizeof(void *) == 8, "the stand-in assumes a 64-bit (LP64) target");
_Static_assert(sizeof(CUmemAllocationProp) == 32, "CUmemAllocationProp layout");
_Static_assert(offsetof(CUmemAllocationProp, location) == 8, "CUmemAllocationProp layout");
_Static_assert(offsetof(CUmemAllocationProp, allocFlags) == 24, "CUmemAllocationProp layout");
_Static_assert(sizeof(CUmemAccessDesc) == 12, "CUmemAccessDesc layout");

/* ------------------------------------------------------------------ state */

struct handle { /* a physical allocation made by cuMemCreate */
    struct handle *next;
    CUmemGenericAllocationHandle id;
    int fd; /* memfd holding the bytes */
    size_t size;
    int vram;      /* location DEVICE: charged against the shared capacity */
    int dev;       /* the device whose capacity it is charged against, if vram */
    int released;  /* cuMemRelease was called: freed once maps drops to 0 */
    unsigned retains;         /* cuMemRetainAllocationHandle references not yet released */
    CUmemAllocationProp prop; /* as cuMemCreate got it, for cuMemGetAllocationPropertiesFromHandle */
    unsigned maps; /* live cuMemMap mappings of it */
};

struct reservation { /* an address range from cuMemAddressReserve or cuMemAlloc_v2 */
    struct reservation *next;
    uintptr_t base;
    size_t size;
    int from_alloc; /* made by cuMemAlloc_v2, to be freed by cuMemFree_v2 */
};

struct mapping { /* a handle mapped by cuMemMap */
    struct mapping *next;
    uintptr_t va;
    size_t size;
    struct handle *h;
    int prot; /* CUmemAccess_flags in force for the devices (one for all: see do_set_access) */
};

struct CUctx_st { struct CUctx_st *next; int dev; };
/* An event: complete once the queued copies it was recorded behind have run (launches
 * and every other call finish before they return). */
struct CUevent_st {
    struct CUevent_st *next;
    uint64_t waits_for; /* the g_drains count that completes it; 0: complete */
};
struct CUfunc_st { const char *name; };

struct shm_table {
    struct { int32_t pid; uint32_t pad; uint64_t bytes; } slot[SHM_SLOTS]; /* pid 0: free */
};

static pthread_mutex_t g_mu = PTHREAD_MUTEX_INITIALIZER;
static int g_inited;
static uint64_t g_capacity; /* each device's */
static int g_devices = 1;   /* GPUSWAP_STANDIN_DEVICES */
static unsigned long g_copy_delay_ms;
static uint64_t g_remote_ns; /* GPUSWAP_STANDIN_REMOTE_NS: a kernel's access to host memory */
static CUuuid g_uuid[DEVICES_MAX]; /* device 0's from GPUSWAP_STANDIN_UUID; see read_uuid */
static int g_time_slice;     /* GPUSWAP_STANDIN_TIME_SLICE: processes' kernels one at a time */
/* Each device's VRAM table, shared by the processes that use the stand-in. */
static int g_shm_fd[DEVICES_MAX] = {-1};
static struct shm_table *g_shm[DEVICES_MAX];
static struct handle *g_handles;
static struct reservation *g_reservations;
static struct mapping *g_mappings;
static CUmemGenericAllocationHandle g_next_handle = 1;
static uintptr_t g_next_token = 0x10000; /* stream and module tokens */
static struct CUctx_st g_primary[DEVICES_MAX]; /* each device's primary context */
static unsigned g_primary_refs[DEVICES_MAX];
static struct CUctx_st *g_contexts; /* made by cuCtxCreate_v2 */
static __thread CUcontext tls_ctx;

struct queued_copy { /* a device-to-device async copy not yet run */
    uintptr_t dst, src;
    size_t n;
};
static struct queued_copy *g_queue;
static size_t g_queued, g_queue_cap;
/* A queued copy whose ranges were gone when it ran: returned by the next synchronize,
 * as a real GPU reports a failed async operation at the next synchronizing call. */
static CUresult g_async_error = CUDA_SUCCESS;
/* How many times a non-empty queue of copies has run: what events wait for. */
static uint64_t g_drains;
static struct CUevent_st *g_events;

static void run_queued_copies(void);
static CUresult synchronize_locked(void);

enum { K_FILL, K_CHECKSUM, K_AXPY, K_READ_PROBE, K_COUNT };
static struct CUfunc_st g_kernels[K_COUNT] = {
    {"gpuswap_fill"}, {"gpuswap_checksum"}, {"gpuswap_axpy"}, {"gpuswap_read_probe"}};

static int ctx_valid(CUcontext c)
{
    for (struct CUctx_st *x = g_contexts; x; x = x->next)
        if (x == c)
            return 1;
    return c >= g_primary && c < g_primary + g_devices;
}

/* The current context's device (begin(1) checked that there is a valid one). */
static int ctx_device(void)
{
    return tls_ctx->dev;
}

/* Whether dev is one of the stand-in's devices. */
static int device_valid(CUdevice dev)
{
    return dev >= 0 && dev < g_devices;
}

static CUresult begin(int need_ctx)
{
    pthread_mutex_lock(&g_mu);
    if (!g_inited)
        return CUDA_ERROR_NOT_INITIALIZED;
    if (need_ctx && (tls_ctx == NULL || !ctx_valid(tls_ctx)))
        return CUDA_ERROR_INVALID_CONTEXT;
    return CUDA_SUCCESS;
}

static CUresult end(CUresult r)
{
    pthread_mutex_unlock(&g_mu);
    return r;
}

/* Entry points (but cuInit, cuDriverGetVersion, cuGetErrorName/String and
 * cuGetProcAddress*, which work before cuInit as the real ones do) open with ENTER:
 * lock, then fail unless cuInit succeeded and, if need_ctx, a valid context is current.
 * They leave through end(), which unlocks. */
#define ENTER(need_ctx)                                                                      \
    do {                                                                                     \
        CUresult e_ = begin(need_ctx);                                                       \
        if (e_ != CUDA_SUCCESS)                                                              \
            return end(e_);                                                                  \
    } while (0)
#define FAIL_IF(cond, code)                                                                  \
    do {                                                                                     \
        if (cond)                                                                            \
            return end(code);                                                                \
    } while (0)

static void *new_token(void)
{
    g_next_token += 16;
    return (void *)g_next_token;
}

/* ------------------------------------------------- shared VRAM accounting */

/* Whether a process still has any file open: an exiting process closes all of its
 * files at once (the kernel's exit_files), before it becomes a zombie, and its
 * /proc/PID/fd lists none from then on. A live stand-in process has at least the
 * shared table open. */
static int has_open_files(pid_t pid)
{
    char path[64];
    snprintf(path, sizeof path, "/proc/%d/fd", (int)pid);
    DIR *dir = opendir(path);
    if (dir == NULL)
        return errno != ENOENT; /* unreadable (another user): assume it holds */
    int open_files = 0;
    struct dirent *e;
    while (!open_files && (e = readdir(dir)) != NULL)
        open_files = e->d_name[0] != '.';
    closedir(dir);
    return open_files;
}

/* Whether a process still holds its VRAM. The real driver releases a process's memory
 * when its device files close, as it exits: before it is a zombie, before anyone waits
 * for it, and before (or as) its other files close, such as its socket to gpuswapd. So
 * an exiting process whose files are closed holds none, nor does a zombie (the daemon
 * once granted a killed victim's memory to a requester whose cuMemCreate then failed,
 * the victim having closed its socket but not yet become a zombie). */
static int holds_vram(pid_t pid)
{
    if (kill(pid, 0) == -1 && errno == ESRCH)
        return 0;
    if (!has_open_files(pid))
        return 0;
    char path[64], line[512];
    snprintf(path, sizeof path, "/proc/%d/stat", (int)pid);
    int fd = open(path, O_RDONLY | O_CLOEXEC);
    if (fd < 0)
        return 1;
    ssize_t n = read(fd, line, sizeof line - 1);
    close(fd);
    if (n <= 0)
        return 1;
    line[n] = 0;
    /* The state follows the command name, which may hold spaces and parentheses. */
    const char *end = strrchr(line, ')');
    return !(end && end[1] == ' ' && (end[2] == 'Z' || end[2] == 'X'));
}

/* Sum of the live slots of a device's table; clears the slots of dead processes.
 * Called under flock. */
static uint64_t shm_used_locked(struct shm_table *t)
{
    uint64_t used = 0;
    for (int i = 0; i < SHM_SLOTS; i++) {
        if (t->slot[i].pid == 0)
            continue;
        if (!holds_vram(t->slot[i].pid))
            t->slot[i].pid = 0, t->slot[i].bytes = 0;
        else
            used += t->slot[i].bytes;
    }
    return used;
}

/* Charges (charge = 1) or uncharges (charge = 0) bytes of device dev's VRAM to this
 * process. */
static CUresult vram_account(int dev, uint64_t bytes, int charge)
{
    CUresult r = CUDA_SUCCESS;
    int32_t me = (int32_t)getpid();
    int mine = -1, empty = -1;
    struct shm_table *t = g_shm[dev];
    flock(g_shm_fd[dev], LOCK_EX);
    uint64_t used = shm_used_locked(t);
    for (int i = 0; i < SHM_SLOTS; i++) {
        if (t->slot[i].pid == me)
            mine = i;
        else if (t->slot[i].pid == 0 && empty < 0)
            empty = i;
    }
    if (charge && (bytes > g_capacity || used > g_capacity - bytes || (mine < 0 && empty < 0))) {
        r = CUDA_ERROR_OUT_OF_MEMORY;
    } else if (charge) {
        if (mine < 0)
            mine = empty, t->slot[mine].pid = me, t->slot[mine].bytes = 0;
        t->slot[mine].bytes += bytes;
    } else if (mine >= 0) {
        uint64_t *b = &t->slot[mine].bytes;
        *b -= bytes < *b ? bytes : *b;
        if (*b == 0)
            t->slot[mine].pid = 0;
    }
    flock(g_shm_fd[dev], LOCK_UN);
    return r;
}

static uint64_t vram_used(int dev)
{
    flock(g_shm_fd[dev], LOCK_EX);
    uint64_t used = shm_used_locked(g_shm[dev]);
    flock(g_shm_fd[dev], LOCK_UN);
    return used;
}

/* ------------------------------------------------------- cuInit, version */

/* GPUSWAP_STANDIN_UUID: "GPU-" and 32 hex digits grouped 8-4-4-4-12, as nvidia-smi
 * prints a UUID; unset, the bytes of "gpuswap-standin0". 0, or -1 with a message.
 * Device i's UUID is device 0's with i added to its last byte ("gpuswap-standin1", ...). */
static int read_uuid(const char *text, CUuuid *uuid)
{
    static const int groups[5] = {8, 4, 4, 4, 12};
    const char *p = text;
    memcpy(uuid->bytes, "gpuswap-standin0", 16);
    if (text == NULL)
        return 0;
    if (strncmp(p, "GPU-", 4) == 0)
        p += 4;
    for (int g = 0, n = 0; g < 5; g++) {
        for (int i = 0; i < groups[g]; i += 2, n++) {
            unsigned int byte;
            if (!isxdigit((unsigned char)p[0]) || !isxdigit((unsigned char)p[1]) ||
                sscanf(p, "%2x", &byte) != 1)
                goto bad;
            uuid->bytes[n] = (char)byte;
            p += 2;
        }
        if (*p != (g < 4 ? '-' : '\0'))
            goto bad;
        p++;
    }
    return 0;
bad:
    fprintf(stderr, "gpuswap stand-in: GPUSWAP_STANDIN_UUID=\"%s\" is not valid; expected "
                    "GPU-xxxxxxxx-xxxx-xxxx-xxxx-xxxxxxxxxxxx (hex digits)\n", text);
    return -1;
}

static CUresult read_config(void)
{
    const char *v = getenv("GPUSWAP_STANDIN_VRAM"), *d = getenv("GPUSWAP_STANDIN_COPY_DELAY_MS");
    const char *remote = getenv("GPUSWAP_STANDIN_REMOTE_NS");
    const char *slice = getenv("GPUSWAP_STANDIN_TIME_SLICE");
    const char *devices = getenv("GPUSWAP_STANDIN_DEVICES");
    uint64_t cap = (uint64_t)1 << 30, delay = 0, remote_ns = 0;
    char *end = NULL;
    if (v != NULL && (gpuswap_parse_size(v, &cap) != 0 || cap == 0)) {
        fprintf(stderr,
                "gpuswap stand-in: GPUSWAP_STANDIN_VRAM=\"%s\" is not a valid size; expected a "
                "positive byte count with an optional binary unit K/KiB, M/MiB or G/GiB, "
                "e.g. 256MiB, 1GiB, 512KiB or 1048576\n", v);
        return CUDA_ERROR_INVALID_VALUE;
    }
    if (d != NULL) {
        errno = 0;
        delay = strtoull(d, &end, 10);
        if (*d < '0' || *d > '9' || *end != '\0' || errno != 0 || delay > 3600000) {
            fprintf(stderr, "gpuswap stand-in: GPUSWAP_STANDIN_COPY_DELAY_MS=\"%s\" is not "
                            "valid; expected whole milliseconds (0 to 3600000)\n", d);
            return CUDA_ERROR_INVALID_VALUE;
        }
    }
    if (remote != NULL) {
        errno = 0;
        remote_ns = strtoull(remote, &end, 10);
        if (*remote < '0' || *remote > '9' || *end != '\0' || errno != 0 ||
            remote_ns > 1000000000) {
            fprintf(stderr, "gpuswap stand-in: GPUSWAP_STANDIN_REMOTE_NS=\"%s\" is not valid; "
                            "expected whole nanoseconds (0 to 1000000000)\n", remote);
            return CUDA_ERROR_INVALID_VALUE;
        }
    }
    if (slice != NULL && strcmp(slice, "0") != 0 && strcmp(slice, "1") != 0) {
        fprintf(stderr, "gpuswap stand-in: GPUSWAP_STANDIN_TIME_SLICE=\"%s\" is not valid; "
                        "expected 0 or 1\n", slice);
        return CUDA_ERROR_INVALID_VALUE;
    }
    if (devices != NULL && (strlen(devices) != 1 || devices[0] < '1' ||
                            devices[0] > '0' + DEVICES_MAX)) {
        fprintf(stderr, "gpuswap stand-in: GPUSWAP_STANDIN_DEVICES=\"%s\" is not valid; "
                        "expected a device count from 1 to %d\n", devices, DEVICES_MAX);
        return CUDA_ERROR_INVALID_VALUE;
    }
    if (read_uuid(getenv("GPUSWAP_STANDIN_UUID"), &g_uuid[0]) != 0)
        return CUDA_ERROR_INVALID_VALUE;
    g_devices = devices != NULL ? devices[0] - '0' : 1;
    for (int i = 0; i < g_devices; i++) {
        g_uuid[i] = g_uuid[0];
        g_uuid[i].bytes[15] = (char)(g_uuid[0].bytes[15] + i);
        g_primary[i].dev = i;
    }
    g_time_slice = slice != NULL && strcmp(slice, "1") == 0;
    g_capacity = cap;
    g_copy_delay_ms = (unsigned long)delay;
    g_remote_ns = remote_ns;
    return CUDA_SUCCESS;
}

/* Device dev's VRAM table: GPUSWAP_STANDIN_SHM (default /gpuswap-standin-UID) for
 * device 0, that name and "-dev" for the others. */
static CUresult open_shm(int dev)
{
    char dflt[64], name[256];
    const char *base = getenv("GPUSWAP_STANDIN_SHM");
    struct stat st;
    void *p = MAP_FAILED;
    if (base == NULL || *base == '\0') {
        snprintf(dflt, sizeof dflt, "/gpuswap-standin-%u", (unsigned)getuid());
        base = dflt;
    }
    if (dev == 0)
        snprintf(name, sizeof name, "%s", base);
    else
        snprintf(name, sizeof name, "%s-%d", base, dev);
    int fd = shm_open(name, O_RDWR | O_CREAT | O_CLOEXEC, 0600);
    if (fd >= 0 && fstat(fd, &st) == 0 &&
        ((size_t)st.st_size >= sizeof *g_shm[0] || ftruncate(fd, sizeof *g_shm[0]) == 0))
        p = mmap(NULL, sizeof *g_shm[0], PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
    if (p == MAP_FAILED) {
        fprintf(stderr, "gpuswap stand-in: cannot use shared memory \"%s\" "
                        "(GPUSWAP_STANDIN_SHM): %s\n", name, strerror(errno));
        if (fd >= 0)
            close(fd);
        return CUDA_ERROR_UNKNOWN;
    }
    g_shm_fd[dev] = fd;
    g_shm[dev] = p;
    return CUDA_SUCCESS;
}

API CUresult cuInit(unsigned int Flags)
{
    CUresult r = CUDA_SUCCESS;
    pthread_mutex_lock(&g_mu);
    if (!g_inited) {
        r = Flags != 0 ? CUDA_ERROR_INVALID_VALUE : read_config();
        for (int i = 0; i < g_devices && r == CUDA_SUCCESS; i++)
            r = open_shm(i);
        g_inited = r == CUDA_SUCCESS;
    }
    return end(r);
}

API CUresult cuDriverGetVersion(int *driverVersion)
{
    if (driverVersion == NULL)
        return CUDA_ERROR_INVALID_VALUE;
    *driverVersion = 12080;
    return CUDA_SUCCESS;
}

/* ----------------------------------------------------------------- errors */

static const struct {
    CUresult code;
    const char *name, *text;
} g_errors[] = {
    {CUDA_SUCCESS, "CUDA_SUCCESS", "no error"},
    {CUDA_ERROR_INVALID_VALUE, "CUDA_ERROR_INVALID_VALUE", "invalid argument"},
    {CUDA_ERROR_OUT_OF_MEMORY, "CUDA_ERROR_OUT_OF_MEMORY", "out of memory"},
    {CUDA_ERROR_NOT_INITIALIZED, "CUDA_ERROR_NOT_INITIALIZED", "initialization error"},
    {CUDA_ERROR_NO_DEVICE, "CUDA_ERROR_NO_DEVICE", "no CUDA-capable device is detected"},
    {CUDA_ERROR_INVALID_DEVICE, "CUDA_ERROR_INVALID_DEVICE", "invalid device ordinal"},
    {CUDA_ERROR_INVALID_IMAGE, "CUDA_ERROR_INVALID_IMAGE", "device kernel image is invalid"},
    {CUDA_ERROR_INVALID_CONTEXT, "CUDA_ERROR_INVALID_CONTEXT", "invalid device context"},
    {CUDA_ERROR_INVALID_HANDLE, "CUDA_ERROR_INVALID_HANDLE", "invalid resource handle"},
    {CUDA_ERROR_NOT_FOUND, "CUDA_ERROR_NOT_FOUND", "named symbol not found"},
    {CUDA_ERROR_NOT_READY, "CUDA_ERROR_NOT_READY", "device not ready"},
    {CUDA_ERROR_ILLEGAL_ADDRESS, "CUDA_ERROR_ILLEGAL_ADDRESS",
     "an illegal memory access was encountered"},
    {CUDA_ERROR_NOT_SUPPORTED, "CUDA_ERROR_NOT_SUPPORTED", "operation not supported"},
    {CUDA_ERROR_UNKNOWN, "CUDA_ERROR_UNKNOWN", "unknown error"},
};

static CUresult error_lookup(CUresult error, const char **pStr, int want_name)
{
    if (pStr == NULL)
        return CUDA_ERROR_INVALID_VALUE;
    for (size_t i = 0; i < sizeof g_errors / sizeof g_errors[0]; i++) {
        if (g_errors[i].code == error) {
            *pStr = want_name ? g_errors[i].name : g_errors[i].text;
            return CUDA_SUCCESS;
        }
    }
    *pStr = NULL;
    return CUDA_ERROR_INVALID_VALUE;
}

API CUresult cuGetErrorName(CUresult error, const char **pStr)
{
    return error_lookup(error, pStr, 1);
}

API CUresult cuGetErrorString(CUresult error, const char **pStr)
{
    return error_lookup(error, pStr, 0);
}

/* ----------------------------------------------------------- entry points */

/* Resolves a base name such as "cuMemAlloc" to the newest export, symbol + "_v2" if
 * there is one, else symbol. As in NVIDIA's driver (checked with 580.159), versioned
 * names ("cuMemAlloc_v2") are not found, and a caller older than CUDA 12.0 gets the
 * legacy cuGetProcAddress. Returns NULL when not found. */
static void *proc_lookup(const char *symbol, int cudaVersion)
{
    Dl_info info;
    void *self, *fn = NULL;
    char v2[256];
    const char *tail = strrchr(symbol, '_');
    int versioned = tail != NULL && tail[1] == 'v' && tail[2] >= '0' && tail[2] <= '9';
    if (strncmp(symbol, "cu", 2) != 0 || versioned)
        return NULL;
    if (dladdr((void *)&cuGetProcAddress_v2, &info) == 0 ||
        (self = dlopen(info.dli_fname, RTLD_LAZY | RTLD_NOLOAD)) == NULL)
        return NULL;
    if ((strcmp(symbol, "cuGetProcAddress") != 0 || cudaVersion >= 12000) &&
        (size_t)snprintf(v2, sizeof v2, "%s_v2", symbol) < sizeof v2)
        fn = dlsym(self, v2);
    if (fn == NULL)
        fn = dlsym(self, symbol);
    dlclose(self);
    return fn;
}

/* Legacy form: an unknown symbol is CUDA_ERROR_NOT_FOUND, *pfn untouched. */
API CUresult cuGetProcAddress(const char *symbol, void **pfn, int cudaVersion, cuuint64_t flags)
{
    void *fn;
    (void)flags;
    if (symbol == NULL || pfn == NULL)
        return CUDA_ERROR_INVALID_VALUE;
    if ((fn = proc_lookup(symbol, cudaVersion)) == NULL)
        return CUDA_ERROR_NOT_FOUND;
    *pfn = fn;
    return CUDA_SUCCESS;
}

/* CUDA 12 form: an unknown symbol is CUDA_SUCCESS with *pfn = NULL and
 * *symbolStatus (if given) = CU_GET_PROC_ADDRESS_SYMBOL_NOT_FOUND. */
API CUresult cuGetProcAddress_v2(const char *symbol, void **pfn, int cudaVersion,
                                 cuuint64_t flags, CUdriverProcAddressQueryResult *symbolStatus)
{
    (void)flags;
    if (symbol == NULL || pfn == NULL)
        return CUDA_ERROR_INVALID_VALUE;
    *pfn = proc_lookup(symbol, cudaVersion);
    if (symbolStatus != NULL)
        *symbolStatus = *pfn ? CU_GET_PROC_ADDRESS_SUCCESS : CU_GET_PROC_ADDRESS_SYMBOL_NOT_FOUND;
    return CUDA_SUCCESS;
}

/* ---------------------------------------------------------------- devices */

API CUresult cuDeviceGet(CUdevice *device, int ordinal)
{
    ENTER(0);
    FAIL_IF(device == NULL, CUDA_ERROR_INVALID_VALUE);
    FAIL_IF(!device_valid(ordinal), CUDA_ERROR_INVALID_DEVICE);
    *device = ordinal;
    return end(CUDA_SUCCESS);
}

API CUresult cuDeviceGetCount(int *count)
{
    ENTER(0);
    FAIL_IF(count == NULL, CUDA_ERROR_INVALID_VALUE);
    *count = g_devices;
    return end(CUDA_SUCCESS);
}

API CUresult cuDeviceGetName(char *name, int len, CUdevice dev)
{
    ENTER(0);
    FAIL_IF(name == NULL || len <= 0, CUDA_ERROR_INVALID_VALUE);
    FAIL_IF(!device_valid(dev), CUDA_ERROR_INVALID_DEVICE);
    snprintf(name, (size_t)len, "gpuswap CPU stand-in");
    return end(CUDA_SUCCESS);
}

API CUresult cuDeviceGetUuid_v2(CUuuid *uuid, CUdevice dev)
{
    ENTER(0);
    FAIL_IF(uuid == NULL, CUDA_ERROR_INVALID_VALUE);
    FAIL_IF(!device_valid(dev), CUDA_ERROR_INVALID_DEVICE);
    *uuid = g_uuid[dev];
    return end(CUDA_SUCCESS);
}

/* The same bytes: the two differ only for MIG instances, which the stand-in has none of. */
API CUresult cuDeviceGetUuid(CUuuid *uuid, CUdevice dev)
{
    return cuDeviceGetUuid_v2(uuid, dev);
}

API CUresult cuDeviceTotalMem_v2(size_t *bytes, CUdevice dev)
{
    ENTER(0);
    FAIL_IF(bytes == NULL, CUDA_ERROR_INVALID_VALUE);
    FAIL_IF(!device_valid(dev), CUDA_ERROR_INVALID_DEVICE);
    *bytes = g_capacity;
    return end(CUDA_SUCCESS);
}

static const int g_attributes[][2] = { /* answered attributes; all others are 0 */
    {CU_DEVICE_ATTRIBUTE_MAX_THREADS_PER_BLOCK, 1024},
    {CU_DEVICE_ATTRIBUTE_MAX_BLOCK_DIM_X, 1024},
    {CU_DEVICE_ATTRIBUTE_MAX_BLOCK_DIM_Y, 1024},
    {CU_DEVICE_ATTRIBUTE_MAX_BLOCK_DIM_Z, 64},
    {CU_DEVICE_ATTRIBUTE_MAX_GRID_DIM_X, 2147483647},
    {CU_DEVICE_ATTRIBUTE_MAX_GRID_DIM_Y, 65535},
    {CU_DEVICE_ATTRIBUTE_MAX_GRID_DIM_Z, 65535},
    {CU_DEVICE_ATTRIBUTE_MAX_SHARED_MEMORY_PER_BLOCK, 49152},
    {CU_DEVICE_ATTRIBUTE_WARP_SIZE, 32},
    {CU_DEVICE_ATTRIBUTE_MULTIPROCESSOR_COUNT, 1},
    {CU_DEVICE_ATTRIBUTE_UNIFIED_ADDRESSING, 1},
    {CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MAJOR, 9},
    {CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MINOR, 0},
    {CU_DEVICE_ATTRIBUTE_VIRTUAL_MEMORY_MANAGEMENT_SUPPORTED, 1},
};

API CUresult cuDeviceGetAttribute(int *pi, CUdevice_attribute attrib, CUdevice dev)
{
    ENTER(0);
    FAIL_IF(pi == NULL, CUDA_ERROR_INVALID_VALUE);
    FAIL_IF(!device_valid(dev), CUDA_ERROR_INVALID_DEVICE);
    *pi = 0;
    for (size_t i = 0; i < sizeof g_attributes / sizeof g_attributes[0]; i++)
        if (g_attributes[i][0] == (int)attrib)
            *pi = g_attributes[i][1];
    return end(CUDA_SUCCESS);
}

/* ------------------------------------------------------ contexts, streams */

API CUresult cuDevicePrimaryCtxRetain(CUcontext *pctx, CUdevice dev)
{
    ENTER(0);
    FAIL_IF(pctx == NULL, CUDA_ERROR_INVALID_VALUE);
    FAIL_IF(!device_valid(dev), CUDA_ERROR_INVALID_DEVICE);
    g_primary_refs[dev]++;
    *pctx = &g_primary[dev];
    return end(CUDA_SUCCESS);
}

/* The primary context stays usable at zero references (a simplification). */
API CUresult cuDevicePrimaryCtxRelease_v2(CUdevice dev)
{
    ENTER(0);
    FAIL_IF(!device_valid(dev), CUDA_ERROR_INVALID_DEVICE);
    FAIL_IF(g_primary_refs[dev] == 0, CUDA_ERROR_INVALID_CONTEXT);
    g_primary_refs[dev]--;
    return end(CUDA_SUCCESS);
}

API CUresult cuCtxCreate_v2(CUcontext *pctx, unsigned int flags, CUdevice dev)
{
    struct CUctx_st *c;
    (void)flags;
    ENTER(0);
    FAIL_IF(pctx == NULL, CUDA_ERROR_INVALID_VALUE);
    FAIL_IF(!device_valid(dev), CUDA_ERROR_INVALID_DEVICE);
    FAIL_IF((c = calloc(1, sizeof *c)) == NULL, CUDA_ERROR_OUT_OF_MEMORY);
    c->dev = dev;
    c->next = g_contexts;
    g_contexts = c;
    *pctx = tls_ctx = c;
    return end(CUDA_SUCCESS);
}

/* Memory is per process, not per context: destroying a context frees none. */
API CUresult cuCtxDestroy_v2(CUcontext ctx)
{
    struct CUctx_st **pp = &g_contexts;
    ENTER(0);
    while (*pp != NULL && *pp != ctx)
        pp = &(*pp)->next;
    FAIL_IF(ctx == NULL || *pp == NULL, CUDA_ERROR_INVALID_CONTEXT); /* or the primary */
    *pp = ctx->next;
    if (tls_ctx == ctx)
        tls_ctx = NULL;
    free(ctx);
    return end(CUDA_SUCCESS);
}

API CUresult cuCtxSetCurrent(CUcontext ctx)
{
    ENTER(0);
    FAIL_IF(ctx != NULL && !ctx_valid(ctx), CUDA_ERROR_INVALID_CONTEXT);
    tls_ctx = ctx;
    return end(CUDA_SUCCESS);
}

API CUresult cuCtxGetCurrent(CUcontext *pctx)
{
    ENTER(0);
    FAIL_IF(pctx == NULL, CUDA_ERROR_INVALID_VALUE);
    *pctx = tls_ctx;
    return end(CUDA_SUCCESS);
}

API CUresult cuCtxGetDevice(CUdevice *device)
{
    ENTER(1);
    FAIL_IF(device == NULL, CUDA_ERROR_INVALID_VALUE);
    *device = ctx_device();
    return end(CUDA_SUCCESS);
}

API CUresult cuCtxSynchronize(void)
{
    ENTER(1);
    return end(synchronize_locked());
}

API CUresult cuStreamCreate(CUstream *phStream, unsigned int Flags)
{
    (void)Flags;
    ENTER(1);
    FAIL_IF(phStream == NULL, CUDA_ERROR_INVALID_VALUE);
    *phStream = new_token();
    return end(CUDA_SUCCESS);
}

API CUresult cuStreamDestroy_v2(CUstream hStream)
{
    ENTER(1);
    FAIL_IF(hStream == NULL, CUDA_ERROR_INVALID_HANDLE);
    return end(CUDA_SUCCESS);
}

API CUresult cuStreamSynchronize(CUstream hStream)
{
    (void)hStream;
    ENTER(1);
    return end(synchronize_locked());
}

/* The stand-in has no graphs: no stream is ever being captured. */
API CUresult cuStreamIsCapturing(CUstream hStream, CUstreamCaptureStatus *captureStatus)
{
    (void)hStream;
    ENTER(1);
    FAIL_IF(captureStatus == NULL, CUDA_ERROR_INVALID_VALUE);
    *captureStatus = CU_STREAM_CAPTURE_STATUS_NONE;
    return end(CUDA_SUCCESS);
}

/* ----------------------------------------------------------------- events */

static int event_valid(CUevent e)
{
    for (struct CUevent_st *x = g_events; x; x = x->next)
        if (x == e)
            return 1;
    return 0;
}

/* Flags are accepted and ignored (no timing is kept). */
API CUresult cuEventCreate(CUevent *phEvent, unsigned int Flags)
{
    (void)Flags;
    ENTER(1);
    FAIL_IF(phEvent == NULL, CUDA_ERROR_INVALID_VALUE);
    struct CUevent_st *e = calloc(1, sizeof *e);
    FAIL_IF(e == NULL, CUDA_ERROR_OUT_OF_MEMORY);
    e->next = g_events;
    g_events = e;
    *phEvent = e;
    return end(CUDA_SUCCESS);
}

/* Whatever the stream, the event completes once the copies queued now have run. */
API CUresult cuEventRecord(CUevent hEvent, CUstream hStream)
{
    (void)hStream;
    ENTER(1);
    FAIL_IF(!event_valid(hEvent), CUDA_ERROR_INVALID_HANDLE);
    hEvent->waits_for = g_queued > 0 ? g_drains + 1 : 0;
    return end(CUDA_SUCCESS);
}

API CUresult cuEventQuery(CUevent hEvent)
{
    ENTER(0);
    FAIL_IF(!event_valid(hEvent), CUDA_ERROR_INVALID_HANDLE);
    return end(g_drains >= hEvent->waits_for ? CUDA_SUCCESS : CUDA_ERROR_NOT_READY);
}

API CUresult cuEventSynchronize(CUevent hEvent)
{
    ENTER(0);
    FAIL_IF(!event_valid(hEvent), CUDA_ERROR_INVALID_HANDLE);
    if (g_drains < hEvent->waits_for)
        run_queued_copies();
    return end(CUDA_SUCCESS);
}

API CUresult cuEventDestroy_v2(CUevent hEvent)
{
    ENTER(0);
    struct CUevent_st **pp = &g_events;
    while (*pp != NULL && *pp != hEvent)
        pp = &(*pp)->next;
    FAIL_IF(*pp == NULL, CUDA_ERROR_INVALID_HANDLE);
    *pp = hEvent->next;
    free(hEvent);
    return end(CUDA_SUCCESS);
}

/* ---------------------------------------------------- mappings and ranges */

static struct mapping *mapping_at(uintptr_t a)
{
    for (struct mapping *m = g_mappings; m; m = m->next)
        if (a >= m->va && a - m->va < m->size)
            return m;
    return NULL;
}

static struct reservation *reservation_at(uintptr_t a)
{
    for (struct reservation *v = g_reservations; v; v = v->next)
        if (a >= v->base && a - v->base < v->size)
            return v;
    return NULL;
}

/* Whether [a, a+n) lies in adjacent mappings whose device access includes need. */
static int range_ok(uintptr_t a, size_t n, int need)
{
    if (a + n < a)
        return 0;
    while (n > 0) {
        struct mapping *m = mapping_at(a);
        if (m == NULL || (m->prot & need) != need)
            return 0;
        size_t left = m->va + m->size - a;
        if (left >= n)
            return 1;
        a += left, n -= left;
    }
    return 1;
}

/* Whether [a, a+n) is exactly a union of whole, adjacent mappings. */
static int whole_mappings(uintptr_t a, size_t n)
{
    if (n == 0 || a + n < a)
        return 0;
    for (uintptr_t p = a; p < a + n;) {
        struct mapping *m = mapping_at(p);
        if (m == NULL || m->va != p || m->size > a + n - p)
            return 0;
        p += m->size;
    }
    return 1;
}

static struct handle *handle_find(CUmemGenericAllocationHandle id)
{
    for (struct handle *h = g_handles; h; h = h->next)
        if (h->id == id)
            return h;
    return NULL;
}

/* Frees a handle once it is released and mapped nowhere, as real CUDA does. */
static void handle_maybe_free(struct handle *h)
{
    struct handle **pp = &g_handles;
    if (!h->released || h->maps != 0)
        return;
    while (*pp != h)
        pp = &(*pp)->next;
    *pp = h->next;
    close(h->fd);
    if (h->vram)
        vram_account(h->dev, h->size, 0);
    free(h);
}

/* ----------------------------------- virtual memory management (locked) */

static CUresult do_create(CUmemGenericAllocationHandle *out, size_t size,
                          const CUmemAllocationProp *prop)
{
    struct handle *h;
    int vram;
    if (out == NULL || prop == NULL || size == 0 || size % GRANULARITY != 0 ||
        prop->type != CU_MEM_ALLOCATION_TYPE_PINNED)
        return CUDA_ERROR_INVALID_VALUE;
    switch (prop->location.type) {
    case CU_MEM_LOCATION_TYPE_DEVICE:
        if (!device_valid(prop->location.id))
            return CUDA_ERROR_INVALID_DEVICE;
        vram = 1;
        break;
    case CU_MEM_LOCATION_TYPE_HOST:
    case CU_MEM_LOCATION_TYPE_HOST_NUMA:
    case CU_MEM_LOCATION_TYPE_HOST_NUMA_CURRENT:
        vram = 0;
        break;
    default:
        return CUDA_ERROR_INVALID_VALUE;
    }
    if ((h = calloc(1, sizeof *h)) == NULL)
        return CUDA_ERROR_OUT_OF_MEMORY;
    if (vram && vram_account(prop->location.id, size, 1) != CUDA_SUCCESS) {
        free(h);
        return CUDA_ERROR_OUT_OF_MEMORY;
    }
    h->fd = memfd_create("gpuswap-standin", MFD_CLOEXEC);
    if (h->fd < 0 || ftruncate(h->fd, (off_t)size) != 0) {
        if (h->fd >= 0)
            close(h->fd);
        if (vram)
            vram_account(prop->location.id, size, 0);
        free(h);
        return CUDA_ERROR_OUT_OF_MEMORY;
    }
    h->id = g_next_handle++;
    h->size = size;
    h->vram = vram;
    h->dev = vram ? prop->location.id : 0;
    h->prop = *prop;
    h->next = g_handles;
    g_handles = h;
    *out = h->id;
    return CUDA_SUCCESS;
}

static CUresult do_release(CUmemGenericAllocationHandle id)
{
    struct handle *h = handle_find(id);
    if (h == NULL || h->released)
        return CUDA_ERROR_INVALID_VALUE;
    if (h->retains > 0) {
        h->retains--;
        return CUDA_SUCCESS;
    }
    h->released = 1;
    handle_maybe_free(h);
    return CUDA_SUCCESS;
}

static CUresult do_reserve(uintptr_t *out, size_t size, size_t align)
{
    struct reservation *v;
    if (size == 0 || size % GRANULARITY != 0 || (align & (align - 1)) != 0)
        return CUDA_ERROR_INVALID_VALUE;
    if (align < GRANULARITY)
        align = GRANULARITY;
    if (size > SIZE_MAX - align)
        return CUDA_ERROR_OUT_OF_MEMORY;
    /* Over-reserve by align, then trim both ends to an aligned range of size bytes. */
    size_t span = size + align;
    void *p = mmap(NULL, span, PROT_NONE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
    if (p == MAP_FAILED)
        return CUDA_ERROR_OUT_OF_MEMORY;
    uintptr_t lo = (uintptr_t)p, base = (lo + align - 1) & ~(uintptr_t)(align - 1);
    if (base > lo)
        munmap(p, base - lo);
    if (lo + span > base + size)
        munmap((void *)(base + size), lo + span - (base + size));
    if ((v = calloc(1, sizeof *v)) == NULL) {
        munmap((void *)base, size);
        return CUDA_ERROR_OUT_OF_MEMORY;
    }
    v->base = base;
    v->size = size;
    v->next = g_reservations;
    g_reservations = v;
    *out = base;
    return CUDA_SUCCESS;
}

static void reservation_free(struct reservation *v)
{
    struct reservation **pp = &g_reservations;
    while (*pp != v)
        pp = &(*pp)->next;
    *pp = v->next;
    munmap((void *)v->base, v->size);
    free(v);
}

static CUresult do_map(uintptr_t va, size_t size, size_t offset, CUmemGenericAllocationHandle id)
{
    struct handle *h = handle_find(id);
    struct reservation *v = reservation_at(va);
    struct mapping *m;
    if (h == NULL || h->released)
        return CUDA_ERROR_INVALID_HANDLE;
    if (size == 0 || (va | size | offset) % GRANULARITY != 0 || offset > h->size ||
        size > h->size - offset || v == NULL || size > v->base + v->size - va)
        return CUDA_ERROR_INVALID_VALUE;
    for (m = g_mappings; m; m = m->next)
        if (m->va < va + size && va < m->va + m->size)
            return CUDA_ERROR_INVALID_VALUE; /* overlaps an existing mapping */
    if ((m = calloc(1, sizeof *m)) == NULL)
        return CUDA_ERROR_OUT_OF_MEMORY;
    if (mmap((void *)va, size, PROT_NONE, MAP_SHARED | MAP_FIXED, h->fd, (off_t)offset) ==
        MAP_FAILED) {
        free(m);
        return CUDA_ERROR_OUT_OF_MEMORY;
    }
    *m = (struct mapping){g_mappings, va, size, h, CU_MEM_ACCESS_FLAGS_PROT_NONE};
    g_mappings = m;
    h->maps++;
    return CUDA_SUCCESS;
}

static CUresult do_unmap(uintptr_t va, size_t size)
{
    struct mapping **pp = &g_mappings;
    if (!whole_mappings(va, size))
        return CUDA_ERROR_INVALID_VALUE;
    while (*pp != NULL) {
        struct mapping *m = *pp;
        if (m->va < va || m->va - va >= size) {
            pp = &m->next;
            continue;
        }
        /* Back to a PROT_NONE reservation at the same address. */
        if (mmap((void *)m->va, m->size, PROT_NONE,
                 MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE | MAP_FIXED, -1, 0) == MAP_FAILED)
            return CUDA_ERROR_UNKNOWN;
        *pp = m->next;
        m->h->maps--;
        handle_maybe_free(m->h);
        free(m);
    }
    return CUDA_SUCCESS;
}

/* Device locations set the protection; host locations are accepted and change nothing.
 * One protection stands for every device's access (the kernels and copies of all of
 * them run on the CPU, through the same mapping): the last device location given wins. */
static CUresult do_set_access(uintptr_t va, size_t size, const CUmemAccessDesc *desc, size_t count)
{
    int prot = -1;
    if (desc == NULL || count == 0)
        return CUDA_ERROR_INVALID_VALUE;
    for (size_t i = 0; i < count; i++) {
        CUmemAccess_flags f = desc[i].flags;
        if (f != CU_MEM_ACCESS_FLAGS_PROT_NONE && f != RO && f != RW)
            return CUDA_ERROR_INVALID_VALUE;
        if (desc[i].location.type == CU_MEM_LOCATION_TYPE_DEVICE &&
            !device_valid(desc[i].location.id))
            return CUDA_ERROR_INVALID_DEVICE;
        if (desc[i].location.type == CU_MEM_LOCATION_TYPE_DEVICE)
            prot = (int)f;
    }
    if (!whole_mappings(va, size))
        return CUDA_ERROR_INVALID_VALUE;
    int os = prot == RW ? PROT_READ | PROT_WRITE : prot == RO ? PROT_READ : PROT_NONE;
    for (uintptr_t p = va; prot >= 0 && p < va + size;) {
        struct mapping *m = mapping_at(p);
        if (mprotect((void *)m->va, m->size, os) != 0)
            return CUDA_ERROR_UNKNOWN;
        m->prot = prot;
        p += m->size;
    }
    return CUDA_SUCCESS;
}

/* ------------------------------------- virtual memory management (API) */

API CUresult cuMemGetAllocationGranularity(size_t *granularity, const CUmemAllocationProp *prop,
                                           CUmemAllocationGranularity_flags option)
{
    ENTER(0);
    FAIL_IF(granularity == NULL || prop == NULL, CUDA_ERROR_INVALID_VALUE);
    FAIL_IF(option != CU_MEM_ALLOC_GRANULARITY_MINIMUM &&
                option != CU_MEM_ALLOC_GRANULARITY_RECOMMENDED,
            CUDA_ERROR_INVALID_VALUE);
    *granularity = GRANULARITY;
    return end(CUDA_SUCCESS);
}

/* The addr hint and flags are ignored. */
API CUresult cuMemAddressReserve(CUdeviceptr *ptr, size_t size, size_t alignment,
                                 CUdeviceptr addr, unsigned long long flags)
{
    uintptr_t base;
    CUresult r;
    (void)addr, (void)flags;
    ENTER(0);
    FAIL_IF(ptr == NULL, CUDA_ERROR_INVALID_VALUE);
    if ((r = do_reserve(&base, size, alignment)) == CUDA_SUCCESS)
        *ptr = base;
    return end(r);
}

API CUresult cuMemAddressFree(CUdeviceptr ptr, size_t size)
{
    ENTER(0);
    struct reservation *v = reservation_at(ptr);
    FAIL_IF(v == NULL || v->base != ptr || v->size != size || v->from_alloc,
            CUDA_ERROR_INVALID_VALUE);
    for (struct mapping *m = g_mappings; m; m = m->next)
        FAIL_IF(m->va >= v->base && m->va - v->base < v->size, CUDA_ERROR_INVALID_VALUE);
    reservation_free(v);
    return end(CUDA_SUCCESS);
}

API CUresult cuMemCreate(CUmemGenericAllocationHandle *handle, size_t size,
                         const CUmemAllocationProp *prop, unsigned long long flags)
{
    ENTER(0);
    FAIL_IF(flags != 0, CUDA_ERROR_INVALID_VALUE);
    return end(do_create(handle, size, prop));
}

API CUresult cuMemRelease(CUmemGenericAllocationHandle handle)
{
    ENTER(0);
    return end(do_release(handle));
}

API CUresult cuMemMap(CUdeviceptr ptr, size_t size, size_t offset,
                      CUmemGenericAllocationHandle handle, unsigned long long flags)
{
    ENTER(0);
    FAIL_IF(flags != 0, CUDA_ERROR_INVALID_VALUE);
    return end(do_map(ptr, size, offset, handle));
}

API CUresult cuMemUnmap(CUdeviceptr ptr, size_t size)
{
    ENTER(0);
    run_queued_copies();
    return end(do_unmap(ptr, size));
}

API CUresult cuMemSetAccess(CUdeviceptr ptr, size_t size, const CUmemAccessDesc *desc,
                            size_t count)
{
    ENTER(0);
    run_queued_copies();
    return end(do_set_access(ptr, size, desc, count));
}

/* The handle mapped at addr (anywhere in the mapping), one more reference to release. */
API CUresult cuMemRetainAllocationHandle(CUmemGenericAllocationHandle *handle, void *addr)
{
    ENTER(0);
    FAIL_IF(handle == NULL, CUDA_ERROR_INVALID_VALUE);
    struct mapping *m = mapping_at((uintptr_t)addr);
    FAIL_IF(m == NULL || m->h->released, CUDA_ERROR_INVALID_VALUE);
    m->h->retains++;
    *handle = m->h->id;
    return end(CUDA_SUCCESS);
}

API CUresult cuMemGetAllocationPropertiesFromHandle(CUmemAllocationProp *prop,
                                                    CUmemGenericAllocationHandle handle)
{
    ENTER(0);
    struct handle *h = handle_find(handle);
    FAIL_IF(prop == NULL || h == NULL || h->released, CUDA_ERROR_INVALID_VALUE);
    *prop = h->prop;
    return end(CUDA_SUCCESS);
}

/* A POSIX file descriptor (a dup of the handle's memfd: the caller closes it), for a
 * handle created with that type requested; other types are not supported here. */
API CUresult cuMemExportToShareableHandle(void *shareableHandle, CUmemGenericAllocationHandle handle,
                                          CUmemAllocationHandleType handleType,
                                          unsigned long long flags)
{
    ENTER(0);
    struct handle *h = handle_find(handle);
    FAIL_IF(shareableHandle == NULL || flags != 0 || h == NULL || h->released,
            CUDA_ERROR_INVALID_VALUE);
    FAIL_IF(handleType != CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR, CUDA_ERROR_NOT_SUPPORTED);
    FAIL_IF(!(h->prop.requestedHandleTypes & CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR),
            CUDA_ERROR_INVALID_VALUE);
    int fd = fcntl(h->fd, F_DUPFD_CLOEXEC, 0);
    FAIL_IF(fd < 0, CUDA_ERROR_OUT_OF_MEMORY);
    *(int *)shareableHandle = fd;
    return end(CUDA_SUCCESS);
}

/* A new handle of the memory another process exported with
 * cuMemExportToShareableHandle: a POSIX file descriptor, passed as the pointer's value
 * as cuda.h says; the new handle holds a dup of it (the caller still closes its own).
 * It is charged no VRAM: the exporter's handle is. Only stand-in memory imports (a
 * memfd, as every handle's memory is); its properties read as pinned memory on device
 * 0 that exports by descriptor (a descriptor does not tell host memory from VRAM). */
API CUresult cuMemImportFromShareableHandle(CUmemGenericAllocationHandle *handle, void *osHandle,
                                            CUmemAllocationHandleType shHandleType)
{
    struct stat st;
    struct handle *h;
    int fd = (int)(intptr_t)osHandle;
    ENTER(0);
    FAIL_IF(shHandleType != CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR, CUDA_ERROR_NOT_SUPPORTED);
    FAIL_IF(handle == NULL || fcntl(fd, F_GET_SEALS) < 0 || fstat(fd, &st) != 0 ||
                st.st_size <= 0 || (size_t)st.st_size % GRANULARITY != 0,
            CUDA_ERROR_INVALID_VALUE);
    FAIL_IF((h = calloc(1, sizeof *h)) == NULL, CUDA_ERROR_OUT_OF_MEMORY);
    if ((h->fd = fcntl(fd, F_DUPFD_CLOEXEC, 0)) < 0) {
        free(h);
        return end(CUDA_ERROR_OUT_OF_MEMORY);
    }
    h->id = g_next_handle++;
    h->size = (size_t)st.st_size;
    h->prop = (CUmemAllocationProp){.type = CU_MEM_ALLOCATION_TYPE_PINNED,
                                    .requestedHandleTypes = CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR,
                                    .location = {CU_MEM_LOCATION_TYPE_DEVICE, 0}};
    h->next = g_handles;
    g_handles = h;
    *handle = h->id;
    return end(CUDA_SUCCESS);
}

/* ---------------------------------------------------------- plain memory */

/* create + reserve + map + access of a handle at `where` (DEVICE: charged as the
 * current context's device's VRAM), locked; the size (and the VRAM charged) is rounded
 * up to the 2 MiB granularity. */
static CUresult alloc_locked(CUdeviceptr *dptr, size_t bytesize, CUmemLocationType where)
{
    int dev = ctx_device();
    CUmemAllocationProp prop = {.type = CU_MEM_ALLOCATION_TYPE_PINNED,
                                .location = {where, where == CU_MEM_LOCATION_TYPE_DEVICE ? dev : 0}};
    CUmemAccessDesc rw = {{CU_MEM_LOCATION_TYPE_DEVICE, dev}, RW};
    CUmemGenericAllocationHandle h;
    uintptr_t va;
    CUresult r;
    if (dptr == NULL || bytesize == 0)
        return CUDA_ERROR_INVALID_VALUE;
    if (bytesize > SIZE_MAX - GRANULARITY)
        return CUDA_ERROR_OUT_OF_MEMORY;
    size_t size = (bytesize + GRANULARITY - 1) / GRANULARITY * GRANULARITY;
    if ((r = do_create(&h, size, &prop)) != CUDA_SUCCESS)
        return r;
    if ((r = do_reserve(&va, size, 0)) != CUDA_SUCCESS) {
        do_release(h);
        return r;
    }
    if ((r = do_map(va, size, 0, h)) == CUDA_SUCCESS)
        r = do_set_access(va, size, &rw, 1);
    do_release(h); /* from here the handle lives exactly as long as its mapping */
    if (r != CUDA_SUCCESS) {
        do_unmap(va, size);
        reservation_free(reservation_at(va));
        return r;
    }
    reservation_at(va)->from_alloc = 1;
    *dptr = va;
    return CUDA_SUCCESS;
}

static void alloc_forget(uintptr_t base);

/* Frees an allocation of alloc_locked at dptr, locked. */
static CUresult free_locked(CUdeviceptr dptr)
{
    CUresult r;
    run_queued_copies();
    struct reservation *v = reservation_at(dptr);
    if (v == NULL || v->base != dptr || !v->from_alloc)
        return CUDA_ERROR_INVALID_VALUE;
    if ((r = do_unmap(v->base, v->size)) == CUDA_SUCCESS) {
        alloc_forget(v->base);
        reservation_free(v);
    }
    return r;
}

API CUresult cuMemAlloc_v2(CUdeviceptr *dptr, size_t bytesize)
{
    ENTER(1);
    return end(alloc_locked(dptr, bytesize, CU_MEM_LOCATION_TYPE_DEVICE));
}

API CUresult cuMemFree_v2(CUdeviceptr dptr)
{
    ENTER(1);
    return end(free_locked(dptr));
}

API CUresult cuMemGetInfo_v2(size_t *free, size_t *total)
{
    ENTER(1);
    FAIL_IF(free == NULL || total == NULL, CUDA_ERROR_INVALID_VALUE);
    uint64_t used = vram_used(ctx_device());
    *free = used < g_capacity ? g_capacity - used : 0;
    *total = g_capacity;
    return end(CUDA_SUCCESS);
}

enum { HOST = 0, DEV = 1, UVA = 2 };

/* Test hook (GPUSWAP_STANDIN_COPY_DELAY_MS): a slow device-to-device copy, slept
 * without the lock. Locked on entry and return. */
static void copy_delay(void)
{
    struct timespec ts = {(time_t)(g_copy_delay_ms / 1000),
                          (long)(g_copy_delay_ms % 1000) * 1000000L};
    if (g_copy_delay_ms == 0)
        return;
    pthread_mutex_unlock(&g_mu);
    while (nanosleep(&ts, &ts) != 0 && errno == EINTR) {
    }
    pthread_mutex_lock(&g_mu);
}

/* Runs every queued copy (locked). They were in flight together, so the copy delay is
 * slept once for all of them. A copy whose ranges are no longer mapped is skipped and
 * its error kept for the next synchronize. */
static void run_queued_copies(void)
{
    if (g_queued == 0)
        return;
    copy_delay();
    /* Another thread may have run the queue while this one slept. */
    for (size_t i = 0; i < g_queued; i++) {
        struct queued_copy *c = &g_queue[i];
        if (range_ok(c->dst, c->n, RW) && range_ok(c->src, c->n, RO))
            memmove((void *)c->dst, (const void *)c->src, c->n);
        else if (g_async_error == CUDA_SUCCESS)
            g_async_error = CUDA_ERROR_ILLEGAL_ADDRESS;
    }
    g_queued = 0;
    g_drains++;
}

/* Waits for the queued copies (locked) and returns the first error of one since the
 * last synchronize. */
static CUresult synchronize_locked(void)
{
    run_queued_copies();
    CUresult r = g_async_error;
    g_async_error = CUDA_SUCCESS;
    return r;
}

/* Queues a device-to-device copy: its ranges are checked now, its bytes move at the
 * next synchronize. */
static CUresult copy_async(uintptr_t dst, uintptr_t src, size_t n)
{
    ENTER(1);
    FAIL_IF(n == 0, CUDA_SUCCESS);
    FAIL_IF(!range_ok(dst, n, RW) || !range_ok(src, n, RO), CUDA_ERROR_INVALID_VALUE);
    if (g_queued == g_queue_cap) {
        size_t cap = g_queue_cap ? 2 * g_queue_cap : 64;
        struct queued_copy *q = realloc(g_queue, cap * sizeof *q);
        FAIL_IF(q == NULL, CUDA_ERROR_OUT_OF_MEMORY);
        g_queue = q, g_queue_cap = cap;
    }
    g_queue[g_queued++] = (struct queued_copy){dst, src, n};
    return end(CUDA_SUCCESS);
}

/* One copy. UVA (cuMemcpy): an address inside a reservation is device memory. */
static CUresult copy(uintptr_t dst, int dst_side, uintptr_t src, int src_side, size_t n)
{
    ENTER(1);
    if (dst_side == UVA) {
        dst_side = reservation_at(dst) ? DEV : HOST;
        src_side = reservation_at(src) ? DEV : HOST;
    }
    run_queued_copies();
    if (dst_side == DEV && src_side == DEV && n > 0)
        copy_delay();
    FAIL_IF(n == 0, CUDA_SUCCESS);
    FAIL_IF((dst_side == HOST && dst == 0) || (src_side == HOST && src == 0) ||
                (dst_side == DEV && !range_ok(dst, n, RW)) ||
                (src_side == DEV && !range_ok(src, n, RO)),
            CUDA_ERROR_INVALID_VALUE);
    memmove((void *)dst, (const void *)src, n);
    return end(CUDA_SUCCESS);
}

API CUresult cuMemcpyHtoD_v2(CUdeviceptr dstDevice, const void *srcHost, size_t ByteCount)
{
    return copy(dstDevice, DEV, (uintptr_t)srcHost, HOST, ByteCount);
}

API CUresult cuMemcpyDtoH_v2(void *dstHost, CUdeviceptr srcDevice, size_t ByteCount)
{
    return copy((uintptr_t)dstHost, HOST, srcDevice, DEV, ByteCount);
}

API CUresult cuMemcpyDtoD_v2(CUdeviceptr dstDevice, CUdeviceptr srcDevice, size_t ByteCount)
{
    return copy(dstDevice, DEV, srcDevice, DEV, ByteCount);
}

API CUresult cuMemcpy(CUdeviceptr dst, CUdeviceptr src, size_t ByteCount)
{
    return copy(dst, UVA, src, UVA, ByteCount);
}

/* Async copies from or to host memory finish before they return; the stream is
 * ignored. */
API CUresult cuMemcpyHtoDAsync_v2(CUdeviceptr dstDevice, const void *srcHost, size_t ByteCount,
                                  CUstream hStream)
{
    return (void)hStream, copy(dstDevice, DEV, (uintptr_t)srcHost, HOST, ByteCount);
}

API CUresult cuMemcpyDtoHAsync_v2(void *dstHost, CUdeviceptr srcDevice, size_t ByteCount,
                                  CUstream hStream)
{
    return (void)hStream, copy((uintptr_t)dstHost, HOST, srcDevice, DEV, ByteCount);
}

API CUresult cuMemcpyDtoDAsync_v2(CUdeviceptr dstDevice, CUdeviceptr srcDevice, size_t ByteCount,
                                  CUstream hStream)
{
    return (void)hStream, copy_async(dstDevice, srcDevice, ByteCount);
}

/* Queued between device ranges; with a host side it finishes before it returns, as a
 * real driver's copy from or to pageable host memory does. */
API CUresult cuMemcpyAsync(CUdeviceptr dst, CUdeviceptr src, size_t ByteCount, CUstream hStream)
{
    (void)hStream;
    pthread_mutex_lock(&g_mu);
    int both_device = reservation_at(dst) != NULL && reservation_at(src) != NULL;
    pthread_mutex_unlock(&g_mu);
    return both_device ? copy_async(dst, src, ByteCount) : copy(dst, UVA, src, UVA, ByteCount);
}

API CUresult cuMemsetD8_v2(CUdeviceptr dstDevice, unsigned char uc, size_t N)
{
    ENTER(1);
    run_queued_copies();
    FAIL_IF(!range_ok(dstDevice, N, RW), CUDA_ERROR_INVALID_VALUE);
    memset((void *)dstDevice, uc, N);
    return end(CUDA_SUCCESS);
}

API CUresult cuMemsetD32_v2(CUdeviceptr dstDevice, unsigned int ui, size_t N)
{
    ENTER(1);
    run_queued_copies();
    FAIL_IF(dstDevice % 4 != 0 || N > SIZE_MAX / 4 || !range_ok(dstDevice, N * 4, RW),
            CUDA_ERROR_INVALID_VALUE);
    for (size_t i = 0; i < N; i++)
        ((uint32_t *)dstDevice)[i] = ui;
    return end(CUDA_SUCCESS);
}

/* ---------------------------------------------------- modules and kernels */

/* Any image (PTX, cubin, anything) is accepted: the kernels are built in. */
API CUresult cuModuleLoadData(CUmodule *module, const void *image)
{
    ENTER(1);
    FAIL_IF(module == NULL || image == NULL, CUDA_ERROR_INVALID_VALUE);
    *module = new_token();
    return end(CUDA_SUCCESS);
}

/* The file is not read. */
API CUresult cuModuleLoad(CUmodule *module, const char *fname)
{
    return cuModuleLoadData(module, fname);
}

API CUresult cuModuleUnload(CUmodule hmod)
{
    ENTER(1);
    FAIL_IF(hmod == NULL, CUDA_ERROR_INVALID_HANDLE);
    return end(CUDA_SUCCESS);
}

API CUresult cuModuleGetFunction(CUfunction *hfunc, CUmodule hmod, const char *name)
{
    ENTER(1);
    FAIL_IF(hfunc == NULL || name == NULL, CUDA_ERROR_INVALID_VALUE);
    FAIL_IF(hmod == NULL, CUDA_ERROR_INVALID_HANDLE);
    for (int k = 0; k < K_COUNT; k++)
        if (strcmp(name, g_kernels[k].name) == 0)
            return *hfunc = &g_kernels[k], end(CUDA_SUCCESS);
    return end(CUDA_ERROR_NOT_FOUND);
}

/* Each built-in's parameters: (offset, size) in bytes, as cuFuncGetParamInfo reports
 * them for the kernels of e2e_kernels.cu (and the interposer's probe.ptx); size 0 ends
 * the list. */
static const size_t g_params[K_COUNT][5][2] = {
    [K_FILL] = {{0, 8}, {8, 8}, {16, 4}},        /* dst, n_words, seed */
    [K_CHECKSUM] = {{0, 8}, {8, 8}, {16, 8}},    /* src, n_words, out */
    [K_AXPY] = {{0, 8}, {8, 8}, {16, 8}, {24, 4}}, /* y, x, n, a */
    [K_READ_PROBE] = {{0, 8}, {8, 8}, {16, 8}},  /* src, n_words, out */
};

static int kernel_index(CUfunction f)
{
    int k = 0;
    while (k < K_COUNT && f != &g_kernels[k])
        k++;
    return k;
}

API CUresult cuFuncGetParamInfo(CUfunction func, size_t paramIndex, size_t *paramOffset,
                                size_t *paramSize)
{
    ENTER(0);
    int k = kernel_index(func);
    FAIL_IF(k == K_COUNT, CUDA_ERROR_INVALID_HANDLE);
    FAIL_IF(paramOffset == NULL || paramSize == NULL || paramIndex >= 5 ||
                g_params[k][paramIndex][1] == 0,
            CUDA_ERROR_INVALID_VALUE);
    *paramOffset = g_params[k][paramIndex][0];
    *paramSize = g_params[k][paramIndex][1];
    return end(CUDA_SUCCESS);
}

/* Elements of size elem_bytes in [a, a + n * elem_bytes) that lie in host memory
 * (mappings of handles not in VRAM): a kernel's remote accesses (locked). */
static uint64_t host_elements(uintptr_t a, uint64_t n, size_t elem_bytes)
{
    uint64_t bytes = 0, left = n * elem_bytes;
    while (left > 0) {
        struct mapping *m = mapping_at(a);
        if (m == NULL)
            break;
        uint64_t here = m->va + m->size - a < left ? m->va + m->size - a : left;
        if (!m->h->vram)
            bytes += here;
        a += here, left -= here;
    }
    return bytes / elem_bytes;
}

#define ARG(T, i) (*(T *)p[i])

/* Accesses of built-in kernel k to host memory: every element of each array it reads or
 * writes that lies in host-backed pages, each counted once per array (locked). */
static uint64_t remote_accesses(int k, void **p)
{
    if (k == K_FILL)
        return host_elements(ARG(CUdeviceptr, 0), ARG(unsigned long long, 1), 4);
    if (k == K_READ_PROBE)
        return host_elements(ARG(CUdeviceptr, 0), ARG(unsigned long long, 1), 4);
    if (k == K_CHECKSUM)
        return host_elements(ARG(CUdeviceptr, 0), ARG(unsigned long long, 1), 4) +
               host_elements(ARG(CUdeviceptr, 2), 1, 8);
    return host_elements(ARG(CUdeviceptr, 0), ARG(unsigned long long, 2), 4) +
           host_elements(ARG(CUdeviceptr, 1), ARG(unsigned long long, 2), 4);
}

/* GPUSWAP_STANDIN_REMOTE_NS: a kernel that read or wrote host memory takes that long
 * per access, slept without the lock after it ran. Locked on entry and return. */
static void remote_delay(uint64_t accesses)
{
    uint64_t ns = accesses * g_remote_ns;
    struct timespec ts = {(time_t)(ns / 1000000000u), (long)(ns % 1000000000u)};
    if (ns == 0)
        return;
    pthread_mutex_unlock(&g_mu);
    while (nanosleep(&ts, &ts) != 0 && errno == EINTR) {
    }
    pthread_mutex_lock(&g_mu);
}

/* GPUSWAP_STANDIN_TIME_SLICE: takes (F_WRLCK) or gives back (F_UNLCK) the device, one
 * byte past the accounting table locked across the processes that share it (an open
 * file description's lock, apart from the table's flock, and gone with the process), so
 * that their kernels run one at a time, remote waits included, as one GPU time-slices
 * the contexts of processes (without MPS). Waits without the lock: another thread may
 * serve the daemon meanwhile. Locked on entry and return. */
static void device_lock(short type)
{
    struct flock l = {.l_type = type, .l_whence = SEEK_SET, .l_start = sizeof *g_shm[0], .l_len = 1};
    int fd = g_shm_fd[ctx_device()];
    if (!g_time_slice)
        return;
    pthread_mutex_unlock(&g_mu);
    while (fcntl(fd, F_OFD_SETLKW, &l) != 0 && errno == EINTR) {
    }
    pthread_mutex_lock(&g_mu);
}

/* Runs built-in kernel k over its whole range (locked). Same results as
 * e2e_kernels.cu: axpy is built with -ffp-contract=off, the .cu uses __fmul_rn. */
static CUresult run_kernel(int k, void **p)
{
    if (k == K_FILL) { /* (dst, n_words, seed) */
        uint32_t *dst = (uint32_t *)ARG(CUdeviceptr, 0), seed = ARG(unsigned int, 2);
        uint64_t n = ARG(unsigned long long, 1);
        if (n > SIZE_MAX / 4 || !range_ok((uintptr_t)dst, n * 4, RW))
            return CUDA_ERROR_ILLEGAL_ADDRESS;
        for (uint64_t i = 0; i < n; i++)
            dst[i] = gpuswap_pattern(seed, i);
    } else if (k == K_CHECKSUM) { /* (src, n_words, out) */
        const uint32_t *src = (const uint32_t *)ARG(CUdeviceptr, 0);
        uint64_t n = ARG(unsigned long long, 1), sum = 0, o;
        uintptr_t out = ARG(CUdeviceptr, 2);
        if (n > SIZE_MAX / 4 || !range_ok((uintptr_t)src, n * 4, RO) || !range_ok(out, 8, RW))
            return CUDA_ERROR_ILLEGAL_ADDRESS;
        for (uint64_t i = 0; i < n; i++)
            sum += (uint64_t)src[i] * gpuswap_checksum_weight(i);
        memcpy(&o, (void *)out, 8);
        o += sum;
        memcpy((void *)out, &o, 8);
    } else if (k == K_READ_PROBE) { /* (src, n_words, out) */
        const uint32_t *src = (const uint32_t *)ARG(CUdeviceptr, 0);
        uint64_t n = ARG(unsigned long long, 1), sum = 0;
        uintptr_t out = ARG(CUdeviceptr, 2);
        if (n > SIZE_MAX / 4 || !range_ok((uintptr_t)src, n * 4, RO))
            return CUDA_ERROR_ILLEGAL_ADDRESS;
        for (uint64_t i = 0; i < n; i++)
            sum += ((const volatile uint32_t *)src)[i];
        if (sum == UINT64_MAX) {
            if (!range_ok(out, 8, RW))
                return CUDA_ERROR_ILLEGAL_ADDRESS;
            memcpy((void *)out, &sum, 8);
        }
    } else { /* K_AXPY: (y, x, n, a) */
        float *y = (float *)ARG(CUdeviceptr, 0), a = ARG(float, 3);
        const float *x = (const float *)ARG(CUdeviceptr, 1);
        uint64_t n = ARG(unsigned long long, 2);
        if (n > SIZE_MAX / 4 || !range_ok((uintptr_t)y, n * 4, RW) ||
            !range_ok((uintptr_t)x, n * 4, RO))
            return CUDA_ERROR_ILLEGAL_ADDRESS;
        for (uint64_t i = 0; i < n; i++)
            y[i] = a * x[i] + y[i];
    }
    return CUDA_SUCCESS;
}

/* The launch configuration is checked, then ignored; only kernelParams is supported. */
API CUresult cuLaunchKernel(CUfunction f, unsigned int gridDimX, unsigned int gridDimY,
                            unsigned int gridDimZ, unsigned int blockDimX, unsigned int blockDimY,
                            unsigned int blockDimZ, unsigned int sharedMemBytes, CUstream hStream,
                            void **kernelParams, void **extra)
{
    (void)sharedMemBytes, (void)hStream, (void)extra;
    ENTER(1);
    run_queued_copies();
    int k = kernel_index(f);
    FAIL_IF(k == K_COUNT, CUDA_ERROR_INVALID_HANDLE);
    FAIL_IF(kernelParams == NULL || !gridDimX || !gridDimY || !gridDimZ || !blockDimX ||
                !blockDimY || !blockDimZ,
            CUDA_ERROR_INVALID_VALUE);
    device_lock(F_WRLCK);
    CUresult r = run_kernel(k, kernelParams);
    if (r == CUDA_SUCCESS && g_remote_ns > 0)
        remote_delay(remote_accesses(k, kernelParams));
    device_lock(F_UNLCK);
    return end(r);
}

/* ------------- stream-ordered pools, managed memory, pitch and IPC (issue 41) */

/*
 * Pools. A pool is a token with its attributes; cuMemAllocAsync and
 * cuMemAllocFromPoolAsync allocate as cuMemAlloc_v2 does (the stand-in runs every call
 * to completion, so an allocation is ready in stream order at once), counted in the
 * pool's used and reserved figures; cuMemFreeAsync runs the stream's queued copies
 * first (what the stream did before the free), then frees. Freed memory goes back to
 * the device at once: the stand-in keeps nothing in reserve whatever the release
 * threshold says, so reserved equals used.
 */
struct CUmemPoolHandle_st {
    struct CUmemPoolHandle_st *next;
    int reuse[3]; /* CU_MEMPOOL_ATTR_REUSE_* 1..3 */
    cuuint64_t release_threshold;
    cuuint64_t used, used_high;
};

/* An allocation a pool or managed memory made, by base address. */
struct pool_alloc {
    struct pool_alloc *next;
    uintptr_t base;
    size_t size;
    struct CUmemPoolHandle_st *pool; /* NULL: managed memory */
};

static struct CUmemPoolHandle_st g_default_pool = {NULL, {1, 1, 1}, 0, 0, 0};
static struct CUmemPoolHandle_st *g_pools; /* made by cuMemPoolCreate */
static struct CUmemPoolHandle_st *g_current_pool = &g_default_pool;
static struct pool_alloc *g_pool_allocs;

static int pool_valid(CUmemoryPool p)
{
    for (struct CUmemPoolHandle_st *x = g_pools; x; x = x->next)
        if (x == p)
            return 1;
    return p == &g_default_pool;
}

static struct pool_alloc *alloc_record(uintptr_t base)
{
    for (struct pool_alloc *a = g_pool_allocs; a; a = a->next)
        if (a->base == base)
            return a;
    return NULL;
}

static void ipc_forget(uintptr_t base);

/* An allocation at base is freed: out of its pool's figures, its IPC export gone. */
static void alloc_forget(uintptr_t base)
{
    struct pool_alloc **pp = &g_pool_allocs;
    ipc_forget(base);
    while (*pp && (*pp)->base != base)
        pp = &(*pp)->next;
    if (*pp == NULL)
        return;
    struct pool_alloc *a = *pp;
    *pp = a->next;
    if (a->pool)
        a->pool->used -= a->size;
    free(a);
}

/* Records an allocation of alloc_locked; frees it again when out of memory. */
static CUresult alloc_note(CUdeviceptr va, struct CUmemPoolHandle_st *pool)
{
    struct pool_alloc *a = calloc(1, sizeof *a);
    if (a == NULL) {
        free_locked(va);
        return CUDA_ERROR_OUT_OF_MEMORY;
    }
    *a = (struct pool_alloc){g_pool_allocs, va, reservation_at(va)->size, pool};
    g_pool_allocs = a;
    if (pool) {
        pool->used += a->size;
        if (pool->used > pool->used_high)
            pool->used_high = pool->used;
    }
    return CUDA_SUCCESS;
}

static CUresult pool_alloc(CUdeviceptr *dptr, size_t bytesize, CUmemoryPool pool)
{
    CUresult r;
    ENTER(1);
    FAIL_IF(!pool_valid(pool), CUDA_ERROR_INVALID_VALUE);
    if ((r = alloc_locked(dptr, bytesize, CU_MEM_LOCATION_TYPE_DEVICE)) == CUDA_SUCCESS)
        r = alloc_note(*dptr, pool);
    return end(r);
}

API CUresult cuMemAllocAsync(CUdeviceptr *dptr, size_t bytesize, CUstream hStream)
{
    (void)hStream;
    return pool_alloc(dptr, bytesize, g_current_pool);
}

API CUresult cuMemAllocFromPoolAsync(CUdeviceptr *dptr, size_t bytesize, CUmemoryPool pool,
                                     CUstream hStream)
{
    (void)hStream;
    return pool_alloc(dptr, bytesize, pool);
}

/* Any allocation of cuMemAlloc_v2's kind may be freed so, as in CUDA. */
API CUresult cuMemFreeAsync(CUdeviceptr dptr, CUstream hStream)
{
    (void)hStream;
    ENTER(1);
    return end(free_locked(dptr));
}

/* Only pinned device memory on device 0, as cuda.h's pools hold. */
API CUresult cuMemPoolCreate(CUmemoryPool *pool, const CUmemPoolProps *props)
{
    ENTER(0);
    FAIL_IF(pool == NULL || props == NULL || props->allocType != CU_MEM_ALLOCATION_TYPE_PINNED ||
                props->location.type != CU_MEM_LOCATION_TYPE_DEVICE,
            CUDA_ERROR_INVALID_VALUE);
    FAIL_IF(props->location.id != 0, CUDA_ERROR_INVALID_DEVICE);
    struct CUmemPoolHandle_st *p = calloc(1, sizeof *p);
    FAIL_IF(p == NULL, CUDA_ERROR_OUT_OF_MEMORY);
    *p = (struct CUmemPoolHandle_st){g_pools, {1, 1, 1}, 0, 0, 0};
    g_pools = p;
    *pool = p;
    return end(CUDA_SUCCESS);
}

/* Its allocations stay valid until freed, as in CUDA; the default pool cannot go. */
API CUresult cuMemPoolDestroy(CUmemoryPool pool)
{
    struct CUmemPoolHandle_st **pp = &g_pools;
    ENTER(0);
    FAIL_IF(!pool_valid(pool) || pool == &g_default_pool, CUDA_ERROR_INVALID_VALUE);
    while (*pp != pool)
        pp = &(*pp)->next;
    *pp = pool->next;
    for (struct pool_alloc *a = g_pool_allocs; a; a = a->next)
        if (a->pool == pool)
            a->pool = &g_default_pool, g_default_pool.used += a->size;
    if (g_current_pool == pool)
        g_current_pool = &g_default_pool;
    free(pool);
    return end(CUDA_SUCCESS);
}

/* The reuse flags are ints, the others cuuint64_t; of the figures only the highs may be
 * set, and only to 0 (a reset), as in CUDA. */
API CUresult cuMemPoolSetAttribute(CUmemoryPool pool, CUmemPool_attribute attr, void *value)
{
    ENTER(0);
    FAIL_IF(!pool_valid(pool) || value == NULL, CUDA_ERROR_INVALID_VALUE);
    switch (attr) {
    case CU_MEMPOOL_ATTR_REUSE_FOLLOW_EVENT_DEPENDENCIES:
    case CU_MEMPOOL_ATTR_REUSE_ALLOW_OPPORTUNISTIC:
    case CU_MEMPOOL_ATTR_REUSE_ALLOW_INTERNAL_DEPENDENCIES:
        pool->reuse[attr - 1] = *(int *)value != 0;
        break;
    case CU_MEMPOOL_ATTR_RELEASE_THRESHOLD:
        pool->release_threshold = *(cuuint64_t *)value;
        break;
    case CU_MEMPOOL_ATTR_RESERVED_MEM_HIGH:
    case CU_MEMPOOL_ATTR_USED_MEM_HIGH:
        FAIL_IF(*(cuuint64_t *)value != 0, CUDA_ERROR_INVALID_VALUE);
        pool->used_high = pool->used;
        break;
    default:
        return end(CUDA_ERROR_INVALID_VALUE);
    }
    return end(CUDA_SUCCESS);
}

API CUresult cuMemPoolGetAttribute(CUmemoryPool pool, CUmemPool_attribute attr, void *value)
{
    ENTER(0);
    FAIL_IF(!pool_valid(pool) || value == NULL, CUDA_ERROR_INVALID_VALUE);
    switch (attr) {
    case CU_MEMPOOL_ATTR_REUSE_FOLLOW_EVENT_DEPENDENCIES:
    case CU_MEMPOOL_ATTR_REUSE_ALLOW_OPPORTUNISTIC:
    case CU_MEMPOOL_ATTR_REUSE_ALLOW_INTERNAL_DEPENDENCIES:
        *(int *)value = pool->reuse[attr - 1];
        break;
    case CU_MEMPOOL_ATTR_RELEASE_THRESHOLD:
        *(cuuint64_t *)value = pool->release_threshold;
        break;
    case CU_MEMPOOL_ATTR_RESERVED_MEM_CURRENT:
    case CU_MEMPOOL_ATTR_USED_MEM_CURRENT:
        *(cuuint64_t *)value = pool->used;
        break;
    case CU_MEMPOOL_ATTR_RESERVED_MEM_HIGH:
    case CU_MEMPOOL_ATTR_USED_MEM_HIGH:
        *(cuuint64_t *)value = pool->used_high;
        break;
    default:
        return end(CUDA_ERROR_INVALID_VALUE);
    }
    return end(CUDA_SUCCESS);
}

/* Nothing is kept in reserve: nothing to trim. */
API CUresult cuMemPoolTrimTo(CUmemoryPool pool, size_t minBytesToKeep)
{
    (void)minBytesToKeep;
    ENTER(0);
    return end(pool_valid(pool) ? CUDA_SUCCESS : CUDA_ERROR_INVALID_VALUE);
}

/* The pools are device 0's for every device (README, "Several devices"). */
API CUresult cuDeviceGetDefaultMemPool(CUmemoryPool *pool_out, CUdevice dev)
{
    ENTER(0);
    FAIL_IF(pool_out == NULL, CUDA_ERROR_INVALID_VALUE);
    FAIL_IF(!device_valid(dev), CUDA_ERROR_INVALID_DEVICE);
    *pool_out = &g_default_pool;
    return end(CUDA_SUCCESS);
}

API CUresult cuDeviceGetMemPool(CUmemoryPool *pool, CUdevice dev)
{
    ENTER(0);
    FAIL_IF(pool == NULL, CUDA_ERROR_INVALID_VALUE);
    FAIL_IF(!device_valid(dev), CUDA_ERROR_INVALID_DEVICE);
    *pool = g_current_pool;
    return end(CUDA_SUCCESS);
}

API CUresult cuDeviceSetMemPool(CUdevice dev, CUmemoryPool pool)
{
    ENTER(0);
    FAIL_IF(!device_valid(dev), CUDA_ERROR_INVALID_DEVICE);
    FAIL_IF(!pool_valid(pool), CUDA_ERROR_INVALID_VALUE);
    g_current_pool = pool;
    return end(CUDA_SUCCESS);
}

/*
 * Managed memory, with a simple paging model: its bytes are host memory the device
 * reads and writes at the same address (a memfd mapped as cuMemAlloc_v2 maps), and it
 * is resident in VRAM, charged against the shared capacity at its whole size, when the
 * capacity has room at its allocation or at a cuMemPrefetchAsync to a device; a
 * prefetch to CU_DEVICE_CPU, or no room, leaves it in host memory, uncharged. A real
 * driver reports managed memory in cuMemGetInfo only as far as its pages are resident;
 * this one pages a whole allocation at a time. Freed by cuMemFree_v2.
 */
API CUresult cuMemAllocManaged(CUdeviceptr *dptr, size_t bytesize, unsigned int flags)
{
    CUresult r;
    ENTER(1);
    FAIL_IF(flags != CU_MEM_ATTACH_GLOBAL && flags != CU_MEM_ATTACH_HOST,
            CUDA_ERROR_INVALID_VALUE);
    if ((r = alloc_locked(dptr, bytesize, CU_MEM_LOCATION_TYPE_HOST)) != CUDA_SUCCESS ||
        (r = alloc_note(*dptr, NULL)) != CUDA_SUCCESS)
        return end(r);
    struct handle *h = mapping_at(*dptr)->h;
    if (flags == CU_MEM_ATTACH_GLOBAL && vram_account(ctx_device(), h->size, 1) == CUDA_SUCCESS)
        h->vram = 1, h->dev = ctx_device();
    return end(CUDA_SUCCESS);
}

/* The managed allocation holding [p, p+n), or NULL. */
static struct pool_alloc *managed_at(uintptr_t p, size_t n)
{
    struct reservation *v = reservation_at(p);
    struct pool_alloc *a = v ? alloc_record(v->base) : NULL;
    if (a == NULL || a->pool != NULL || n == 0 || n > v->base + v->size - p)
        return NULL;
    return a;
}

API CUresult cuMemAdvise(CUdeviceptr devPtr, size_t count, CUmem_advise advice, CUdevice device)
{
    ENTER(0);
    FAIL_IF(managed_at(devPtr, count) == NULL || advice < CU_MEM_ADVISE_SET_READ_MOSTLY ||
                advice > CU_MEM_ADVISE_UNSET_ACCESSED_BY,
            CUDA_ERROR_INVALID_VALUE);
    FAIL_IF(!device_valid(device) && device != CU_DEVICE_CPU, CUDA_ERROR_INVALID_DEVICE);
    return end(CUDA_SUCCESS);
}

/* Pages the whole allocation holding the range (the model's unit) in or out. */
API CUresult cuMemPrefetchAsync(CUdeviceptr devPtr, size_t count, CUdevice dstDevice,
                                CUstream hStream)
{
    (void)hStream;
    ENTER(1);
    FAIL_IF(managed_at(devPtr, count) == NULL, CUDA_ERROR_INVALID_VALUE);
    FAIL_IF(!device_valid(dstDevice) && dstDevice != CU_DEVICE_CPU, CUDA_ERROR_INVALID_DEVICE);
    struct handle *h = mapping_at(devPtr)->h;
    if (h->vram && h->dev != dstDevice) /* to the host or to another device's VRAM */
        h->vram = 0, vram_account(h->dev, h->size, 0);
    if (dstDevice != CU_DEVICE_CPU && !h->vram &&
        vram_account(dstDevice, h->size, 1) == CUDA_SUCCESS)
        h->vram = 1, h->dev = dstDevice;
    return end(CUDA_SUCCESS);
}

/* Pitched memory: rows of the width rounded up to 512 bytes, as cuMemAlloc_v2. */
API CUresult cuMemAllocPitch_v2(CUdeviceptr *dptr, size_t *pPitch, size_t WidthInBytes,
                                size_t Height, unsigned int ElementSizeBytes)
{
    CUresult r;
    ENTER(1);
    FAIL_IF(pPitch == NULL || WidthInBytes == 0 || Height == 0 ||
                (ElementSizeBytes != 4 && ElementSizeBytes != 8 && ElementSizeBytes != 16) ||
                WidthInBytes > SIZE_MAX - 511,
            CUDA_ERROR_INVALID_VALUE);
    size_t pitch = (WidthInBytes + 511) / 512 * 512;
    FAIL_IF(Height > SIZE_MAX / pitch, CUDA_ERROR_OUT_OF_MEMORY);
    if ((r = alloc_locked(dptr, pitch * Height, CU_MEM_LOCATION_TYPE_DEVICE)) == CUDA_SUCCESS)
        *pPitch = pitch;
    return end(r);
}

/* One side of a 2D copy: its row 0's address and whether it is device memory. */
static int copy_side(CUmemorytype type, const void *host, CUdeviceptr dev, size_t x, size_t y,
                     size_t pitch, uintptr_t *at)
{
    if (type == CU_MEMORYTYPE_HOST)
        *at = (uintptr_t)host;
    else if (type == CU_MEMORYTYPE_DEVICE || type == CU_MEMORYTYPE_UNIFIED)
        *at = (uintptr_t)dev;
    else
        return -1; /* arrays are not modelled */
    *at += y * pitch + x;
    return type == CU_MEMORYTYPE_HOST ? HOST : type == CU_MEMORYTYPE_DEVICE ? DEV : UVA;
}

/* Row by row, each row a copy of its own (a bad row fails the rest). */
API CUresult cuMemcpy2D_v2(const CUDA_MEMCPY2D *c)
{
    uintptr_t src, dst;
    if (c == NULL)
        return CUDA_ERROR_INVALID_VALUE;
    int s = copy_side(c->srcMemoryType, c->srcHost, c->srcDevice, c->srcXInBytes, c->srcY,
                      c->srcPitch, &src);
    int d = copy_side(c->dstMemoryType, c->dstHost, c->dstDevice, c->dstXInBytes, c->dstY,
                      c->dstPitch, &dst);
    if (s < 0 || d < 0 || (c->Height > 1 && (c->srcPitch < c->WidthInBytes ||
                                             c->dstPitch < c->WidthInBytes)))
        return CUDA_ERROR_INVALID_VALUE;
    if (s == UVA || d == UVA)
        s = d = UVA;
    for (size_t row = 0; row < c->Height; row++) {
        CUresult r = copy(dst + row * c->dstPitch, d, src + row * c->srcPitch, s, c->WidthInBytes);
        if (r != CUDA_SUCCESS)
            return r;
    }
    return CUDA_SUCCESS;
}

/*
 * IPC. cuIpcGetMemHandle writes, for the whole reservation holding dptr (every byte of
 * it mapped), a descriptor of its mappings to /dev/shm/gpuswap-standin-ipc-PID-BASE: one
 * line "offset size fd fd_offset" per mapping. The handle names that file (a magic, the
 * pid, the base). cuIpcOpenMemHandle_v2 in another process reserves a range of the same
 * size and maps each mapping's memfd there through /proc/PID/fd/FD, so both processes
 * see the same bytes; the importer charges no VRAM (the exporter's handles do). As a
 * real driver, it exports only cuMemAlloc's own memory: the interposer exports its
 * managed buffers (reservations backed chunk by chunk) by descriptor passing instead,
 * with cuMemExportToShareableHandle and cuMemImportFromShareableHandle.
 */
#define IPC_MAGIC 0x47534950u /* "GSIP" */

struct ipc_handle {
    uint32_t magic;
    int32_t pid;
    uint64_t base, size;
};
_Static_assert(sizeof(struct ipc_handle) <= sizeof(CUipcMemHandle), "IPC handle size");

static void ipc_path(char *out, size_t n, int32_t pid, uint64_t base)
{
    snprintf(out, n, "/dev/shm/gpuswap-standin-ipc-%d-%llx", (int)pid, (unsigned long long)base);
}

/* The export of base, if any, is withdrawn (its memory is freed). */
static void ipc_forget(uintptr_t base)
{
    char path[96];
    ipc_path(path, sizeof path, (int32_t)getpid(), base);
    unlink(path);
}

API CUresult cuIpcGetMemHandle(CUipcMemHandle *pHandle, CUdeviceptr dptr)
{
    char path[96];
    ENTER(1);
    struct reservation *v = reservation_at(dptr);
    /* As CUDA's: only cuMemAlloc's own memory exports. A range mapped with cuMemMap
     * does not (cuMemExportToShareableHandle exports its handles), nor managed memory,
     * nor a pool's (cuMemPoolExportPointer). */
    FAIL_IF(pHandle == NULL || v == NULL || !v->from_alloc || alloc_record(v->base) != NULL ||
                !range_ok(v->base, v->size, 0),
            CUDA_ERROR_INVALID_VALUE);
    ipc_path(path, sizeof path, (int32_t)getpid(), v->base);
    FILE *f = fopen(path, "w");
    FAIL_IF(f == NULL, CUDA_ERROR_UNKNOWN);
    for (uintptr_t p = v->base; p < v->base + v->size;) {
        struct mapping *m = mapping_at(p);
        /* Mappings here start at offset 0 of their handle (cuMemAlloc's and the
         * interposer's chunks do; the table keeps no offset). */
        fprintf(f, "%zu %zu %d 0\n", (size_t)(m->va - v->base), m->size, m->h->fd);
        p += m->size;
    }
    FAIL_IF(fclose(f) != 0, CUDA_ERROR_UNKNOWN);
    struct ipc_handle h = {IPC_MAGIC, (int32_t)getpid(), v->base, v->size};
    memset(pHandle, 0, sizeof *pHandle);
    memcpy(pHandle, &h, sizeof h);
    return end(CUDA_SUCCESS);
}

/* Maps one line of an export at base + offset: the exporter's memfd, reopened. */
static CUresult ipc_map_one(uintptr_t base, int32_t pid, size_t offset, size_t size, int fd)
{
    char path[64];
    struct stat st;
    struct handle *h = calloc(1, sizeof *h);
    if (h == NULL)
        return CUDA_ERROR_OUT_OF_MEMORY;
    snprintf(path, sizeof path, "/proc/%d/fd/%d", (int)pid, fd);
    h->fd = open(path, O_RDWR | O_CLOEXEC);
    if (h->fd < 0 || fstat(h->fd, &st) != 0 || (size_t)st.st_size < size) {
        if (h->fd >= 0)
            close(h->fd);
        free(h);
        return CUDA_ERROR_INVALID_HANDLE;
    }
    h->id = g_next_handle++;
    h->size = (size_t)st.st_size;
    h->next = g_handles;
    g_handles = h;
    CUresult r = do_map(base + offset, size, 0, h->id);
    do_release(h->id); /* lives as long as its mapping */
    return r;
}

API CUresult cuIpcOpenMemHandle_v2(CUdeviceptr *pdptr, CUipcMemHandle handle, unsigned int Flags)
{
    struct ipc_handle h;
    char path[96];
    size_t offset, size;
    int fd;
    uintptr_t base = 0;
    CUmemAccessDesc rw = {{CU_MEM_LOCATION_TYPE_DEVICE, 0}, RW};
    memcpy(&h, &handle, sizeof h);
    ENTER(1);
    FAIL_IF(pdptr == NULL || (Flags & ~CU_IPC_MEM_LAZY_ENABLE_PEER_ACCESS) != 0 ||
                h.magic != IPC_MAGIC,
            CUDA_ERROR_INVALID_VALUE);
    /* As CUDA: a process cannot open its own export. */
    FAIL_IF(h.pid == (int32_t)getpid(), CUDA_ERROR_INVALID_CONTEXT);
    ipc_path(path, sizeof path, h.pid, h.base);
    FILE *f = fopen(path, "r");
    FAIL_IF(f == NULL, CUDA_ERROR_INVALID_HANDLE);
    CUresult r = do_reserve(&base, (size_t)h.size, 0);
    while (r == CUDA_SUCCESS && fscanf(f, "%zu %zu %d %*d", &offset, &size, &fd) == 3)
        r = ipc_map_one(base, h.pid, offset, size, fd);
    fclose(f);
    if (r == CUDA_SUCCESS)
        r = do_set_access(base, (size_t)h.size, &rw, 1);
    if (r != CUDA_SUCCESS) {
        struct reservation *v = reservation_at(base);
        for (struct mapping *m; v && (m = g_mappings) != NULL;) {
            while (m && (m->va < v->base || m->va - v->base >= v->size))
                m = m->next;
            if (m == NULL || do_unmap(m->va, m->size) != CUDA_SUCCESS)
                break;
        }
        if (v)
            reservation_free(v);
        return end(r);
    }
    reservation_at(base)->from_alloc = 1;
    *pdptr = base;
    return end(CUDA_SUCCESS);
}

API CUresult cuIpcCloseMemHandle(CUdeviceptr dptr)
{
    ENTER(1);
    return end(free_locked(dptr));
}

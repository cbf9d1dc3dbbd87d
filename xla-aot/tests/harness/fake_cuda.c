/*
 * A fake NVIDIA driver for the launcher tests: built as libcuda.so.1, it exports the entry points
 * the launcher resolves (runtime-min's cuda::DRIVER_FUNCTIONS) and writes one line per call to
 * the file $FAKE_CUDA_LOG (stderr without it). "Device" memory is host memory, so copies really
 * copy, and every launch is logged with its grid and its arguments as offsets from the device
 * arena.
 *
 *   FAKE_CUDA_KERNELS=<lib.so>[:<lib.so>...]  runs each launch as the GPU would: the host build of
 *                                             the same kernel in grid form (the library of the
 *                                             model compiled with Options::grid, whose kernel
 *                                             <k> is the PTX entry <k>_entry), once per thread of
 *                                             the grid, on the arguments the launch passed.
 *   FAKE_CUDA_FAIL=<entry point>=<CUresult>   makes that entry point fail with that code.
 *   -DOMIT_LAUNCH                             builds a driver without cuLaunchKernel.
 *
 * It also checks what a real driver would reject: a call that needs a current context without
 * one (CUDA_ERROR_INVALID_CONTEXT), a copy outside the allocation (CUDA_ERROR_INVALID_VALUE), an
 * entry name the PTX does not define (CUDA_ERROR_NOT_FOUND), a parameter count that does not
 * match the entry's.
 */
#define _GNU_SOURCE
#include <dlfcn.h>
#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

typedef int CUresult;
typedef uint64_t CUdeviceptr;

enum {
    CUDA_SUCCESS = 0,
    CUDA_ERROR_INVALID_VALUE = 1,
    CUDA_ERROR_OUT_OF_MEMORY = 2,
    CUDA_ERROR_NOT_INITIALIZED = 3,
    CUDA_ERROR_NO_DEVICE = 100,
    CUDA_ERROR_INVALID_CONTEXT = 201,
    CUDA_ERROR_NOT_FOUND = 500,
    CUDA_ERROR_LAUNCH_FAILED = 719,
};

#define FAKE_CONTEXT ((void *)0xC0C0)
#define FAKE_MODULE ((void *)0x30D0)
#define MAX_FUNCTIONS 256
#define MAX_ALLOCS 16

static FILE *log_file;
static int initialised;
static int depth; /* contexts pushed */
static const char *ptx;
static char *names[MAX_FUNCTIONS];
static int params[MAX_FUNCTIONS];
static int functions;
static struct { char *base; size_t size; } allocs[MAX_ALLOCS];
static int nallocs;

static void say(const char *fmt, ...) {
    if (!log_file) {
        const char *p = getenv("FAKE_CUDA_LOG");
        log_file = p ? fopen(p, "a") : stderr;
        if (!log_file) log_file = stderr;
    }
    va_list ap;
    va_start(ap, fmt);
    vfprintf(log_file, fmt, ap);
    va_end(ap);
    fputc('\n', log_file);
    fflush(log_file);
}

/* FNV-1a, 64-bit: what the test compares copies with. */
static uint64_t fnv(const void *p, size_t n) {
    const unsigned char *b = p;
    uint64_t h = 0xcbf29ce484222325ull;
    for (size_t i = 0; i < n; i++) h = (h ^ b[i]) * 0x100000001b3ull;
    return h;
}

static int injected(const char *fn) {
    const char *f = getenv("FAKE_CUDA_FAIL");
    size_t n = strlen(fn);
    if (f && strncmp(f, fn, n) == 0 && f[n] == '=') return atoi(f + n + 1);
    return 0;
}

#define ENTER(fn)                                          \
    do {                                                   \
        int r_ = injected(fn);                             \
        if (r_) {                                          \
            say("%s -> %d (injected)", fn, r_);            \
            return r_;                                     \
        }                                                  \
    } while (0)

#define NEED_CONTEXT(fn)                                   \
    do {                                                   \
        if (!initialised) {                                \
            say("%s -> not initialised", fn);              \
            return CUDA_ERROR_NOT_INITIALIZED;             \
        }                                                  \
        if (depth == 0) {                                  \
            say("%s -> without a current context", fn);    \
            return CUDA_ERROR_INVALID_CONTEXT;             \
        }                                                  \
    } while (0)

/* The allocation holding [p, p + n), and p's offset in it; -1 if none. */
static int find(CUdeviceptr p, size_t n, uint64_t *off) {
    for (int i = 0; i < nallocs; i++) {
        CUdeviceptr b = (CUdeviceptr)(uintptr_t)allocs[i].base;
        if (p >= b && p + n <= b + allocs[i].size) {
            *off = p - b;
            return i;
        }
    }
    return -1;
}

CUresult cuInit(unsigned flags) {
    ENTER("cuInit");
    initialised = 1;
    say("cuInit %u", flags);
    return CUDA_SUCCESS;
}

CUresult cuDeviceGet(int *dev, int ordinal) {
    ENTER("cuDeviceGet");
    if (!initialised) return CUDA_ERROR_NOT_INITIALIZED;
    if (ordinal != 0) return CUDA_ERROR_NO_DEVICE;
    *dev = 0;
    say("cuDeviceGet %d", ordinal);
    return CUDA_SUCCESS;
}

CUresult cuDevicePrimaryCtxRetain(void **ctx, int dev) {
    ENTER("cuDevicePrimaryCtxRetain");
    *ctx = FAKE_CONTEXT;
    say("cuDevicePrimaryCtxRetain %d", dev);
    return CUDA_SUCCESS;
}

CUresult cuDevicePrimaryCtxRelease_v2(int dev) {
    ENTER("cuDevicePrimaryCtxRelease_v2");
    say("cuDevicePrimaryCtxRelease %d", dev);
    return CUDA_SUCCESS;
}

CUresult cuCtxPushCurrent_v2(void *ctx) {
    ENTER("cuCtxPushCurrent_v2");
    if (ctx != FAKE_CONTEXT) {
        say("cuCtxPushCurrent -> not a context");
        return CUDA_ERROR_INVALID_CONTEXT;
    }
    depth++;
    say("cuCtxPushCurrent");
    return CUDA_SUCCESS;
}

CUresult cuCtxPopCurrent_v2(void **ctx) {
    ENTER("cuCtxPopCurrent_v2");
    if (depth == 0) {
        say("cuCtxPopCurrent -> nothing pushed");
        return CUDA_ERROR_INVALID_CONTEXT;
    }
    depth--;
    if (ctx) *ctx = FAKE_CONTEXT;
    say("cuCtxPopCurrent");
    return CUDA_SUCCESS;
}

CUresult cuModuleLoadData(void **module, const void *image) {
    ENTER("cuModuleLoadData");
    NEED_CONTEXT("cuModuleLoadData");
    ptx = image;
    size_t n = strlen(ptx);
    say("cuModuleLoadData %zu bytes fnv %016llx", n, (unsigned long long)fnv(ptx, n));
    *module = FAKE_MODULE;
    return CUDA_SUCCESS;
}

CUresult cuModuleUnload(void *module) {
    ENTER("cuModuleUnload");
    NEED_CONTEXT("cuModuleUnload");
    say("cuModuleUnload%s", module == FAKE_MODULE ? "" : " -> not a module");
    return module == FAKE_MODULE ? CUDA_SUCCESS : CUDA_ERROR_INVALID_VALUE;
}

CUresult cuModuleGetFunction(void **f, void *module, const char *name) {
    ENTER("cuModuleGetFunction");
    NEED_CONTEXT("cuModuleGetFunction");
    if (module != FAKE_MODULE || !ptx || functions == MAX_FUNCTIONS) return CUDA_ERROR_INVALID_VALUE;
    char head[512];
    snprintf(head, sizeof head, ".entry %s(", name);
    const char *at = strstr(ptx, head);
    if (!at) {
        say("cuModuleGetFunction %s -> not found", name);
        return CUDA_ERROR_NOT_FOUND;
    }
    /* The entry's parameters: ".param .u64 <name>_param_<i>" up to the closing parenthesis. */
    const char *end = strchr(at, ')');
    int count = 0;
    for (const char *p = at; p && p < end; p = strstr(p + 1, ".param ")) {
        if (p != at) count++;
    }
    names[functions] = strdup(name);
    params[functions] = count;
    functions++;
    *f = (void *)(uintptr_t)functions;
    say("cuModuleGetFunction %s", name);
    return CUDA_SUCCESS;
}

CUresult cuMemAlloc_v2(CUdeviceptr *p, size_t bytes) {
    ENTER("cuMemAlloc_v2");
    NEED_CONTEXT("cuMemAlloc");
    if (nallocs == MAX_ALLOCS) return CUDA_ERROR_OUT_OF_MEMORY;
    size_t rounded = (bytes + 255) / 256 * 256;
    char *b = aligned_alloc(256, rounded ? rounded : 256);
    if (!b) return CUDA_ERROR_OUT_OF_MEMORY;
    memset(b, 0xA5, rounded ? rounded : 256);
    allocs[nallocs].base = b;
    allocs[nallocs].size = bytes;
    nallocs++;
    *p = (CUdeviceptr)(uintptr_t)b;
    say("cuMemAlloc %zu", bytes);
    return CUDA_SUCCESS;
}

CUresult cuMemFree_v2(CUdeviceptr p) {
    ENTER("cuMemFree_v2");
    NEED_CONTEXT("cuMemFree");
    uint64_t off;
    int i = find(p, 0, &off);
    if (i < 0 || off != 0) {
        say("cuMemFree -> not an allocation");
        return CUDA_ERROR_INVALID_VALUE;
    }
    say("cuMemFree %zu", allocs[i].size);
    return CUDA_SUCCESS;
}

static CUresult copy_in(const char *what, CUdeviceptr dst, const void *src, size_t n, void *stream) {
    NEED_CONTEXT(what);
    uint64_t off;
    if (find(dst, n, &off) < 0 || !src) {
        say("%s -> outside every allocation", what);
        return CUDA_ERROR_INVALID_VALUE;
    }
    memcpy((void *)(uintptr_t)dst, src, n);
    say("%s +%llu %zu fnv %016llx%s", what, (unsigned long long)off, n,
        (unsigned long long)fnv(src, n), stream ? " on a stream" : "");
    return CUDA_SUCCESS;
}

CUresult cuMemcpyHtoD_v2(CUdeviceptr dst, const void *src, size_t n) {
    ENTER("cuMemcpyHtoD_v2");
    return copy_in("cuMemcpyHtoD", dst, src, n, NULL);
}

CUresult cuMemcpyHtoDAsync_v2(CUdeviceptr dst, const void *src, size_t n, void *stream) {
    ENTER("cuMemcpyHtoDAsync_v2");
    return copy_in("cuMemcpyHtoDAsync", dst, src, n, stream);
}

CUresult cuMemcpyDtoHAsync_v2(void *dst, CUdeviceptr src, size_t n, void *stream) {
    ENTER("cuMemcpyDtoHAsync_v2");
    NEED_CONTEXT("cuMemcpyDtoHAsync");
    uint64_t off;
    if (find(src, n, &off) < 0 || !dst) {
        say("cuMemcpyDtoHAsync -> outside every allocation");
        return CUDA_ERROR_INVALID_VALUE;
    }
    memcpy(dst, (const void *)(uintptr_t)src, n);
    say("cuMemcpyDtoHAsync +%llu %zu%s", (unsigned long long)off, n, stream ? " on a stream" : "");
    return CUDA_SUCCESS;
}

#ifndef OMIT_LAUNCH
/* The host build of PTX entry `entry` (its name without "_entry"), or NULL without
 * FAKE_CUDA_KERNELS. */
typedef void (*host_kernel)();
#define MAX_KERNEL_LIBS 16
static host_kernel find_host_kernel(const char *entry, long long *threads_per_call) {
    static void *libs[MAX_KERNEL_LIBS];
    static int nlibs = -1;
    const char *paths = getenv("FAKE_CUDA_KERNELS");
    if (!paths) return NULL;
    if (nlibs < 0) {
        /* A colon-separated list of libraries, searched in order. */
        char *list = strdup(paths);
        nlibs = 0;
        for (char *p = strtok(list, ":"); p && nlibs < MAX_KERNEL_LIBS; p = strtok(NULL, ":")) {
            if (!(libs[nlibs++] = dlopen(p, RTLD_NOW))) {
                say("FAKE_CUDA_KERNELS: %s", dlerror());
                exit(4);
            }
        }
        free(list);
    }
    char name[512];
    size_t n = strlen(entry);
    if (n < 6 || n - 6 >= sizeof name || strcmp(entry + n - 6, "_entry") != 0) return NULL;
    memcpy(name, entry, n - 6);
    name[n - 6] = 0;
    for (int i = 0; i < nlibs; i++) {
        host_kernel k = (host_kernel)dlsym(libs[i], name);
        if (k) {
            /* A tiled kernel's host form runs a whole block per call (codegen/gpu/tiled.rs). */
            char step[560];
            snprintf(step, sizeof step, "%s_threads_per_call", name);
            const int *per_call = dlsym(libs[i], step);
            *threads_per_call = per_call ? *per_call : 1;
            return k;
        }
    }
    say("FAKE_CUDA_KERNELS: no host kernel %s", name);
    exit(4);
}

/* Runs host kernel k(args..., i) for i < calls (every thread, or every block of a tiled one). */
static int run_grid(host_kernel k, int nargs, void **kernel_params, long long calls) {
#define A(i) ((void *)(uintptr_t) * (CUdeviceptr *)kernel_params[i])
    for (long long t = 0; t < calls; t++) {
        switch (nargs) {
        case 1: k(A(0), t); break;
        case 2: k(A(0), A(1), t); break;
        case 3: k(A(0), A(1), A(2), t); break;
        case 4: k(A(0), A(1), A(2), A(3), t); break;
        case 5: k(A(0), A(1), A(2), A(3), A(4), t); break;
        case 6: k(A(0), A(1), A(2), A(3), A(4), A(5), t); break;
        case 7: k(A(0), A(1), A(2), A(3), A(4), A(5), A(6), t); break;
        case 8: k(A(0), A(1), A(2), A(3), A(4), A(5), A(6), A(7), t); break;
        case 9: k(A(0), A(1), A(2), A(3), A(4), A(5), A(6), A(7), A(8), t); break;
        case 10: k(A(0), A(1), A(2), A(3), A(4), A(5), A(6), A(7), A(8), A(9), t); break;
        case 11: k(A(0), A(1), A(2), A(3), A(4), A(5), A(6), A(7), A(8), A(9), A(10), t); break;
        case 12: k(A(0), A(1), A(2), A(3), A(4), A(5), A(6), A(7), A(8), A(9), A(10), A(11), t); break;
        default: return -1;
        }
    }
#undef A
    return 0;
}

CUresult cuLaunchKernel(void *f, unsigned gx, unsigned gy, unsigned gz, unsigned bx, unsigned by,
                        unsigned bz, unsigned shared, void *stream, void **kernel_params,
                        void **extra) {
    ENTER("cuLaunchKernel");
    NEED_CONTEXT("cuLaunchKernel");
    uintptr_t i = (uintptr_t)f;
    if (i == 0 || i > (uintptr_t)functions || !kernel_params || extra) {
        say("cuLaunchKernel -> bad function or parameters");
        return CUDA_ERROR_INVALID_VALUE;
    }
    char line[4096];
    int at = snprintf(line, sizeof line, "cuLaunchKernel %s grid %u,%u,%u block %u,%u,%u shared %u%s args",
                      names[i - 1], gx, gy, gz, bx, by, bz, shared, stream ? " on a stream" : "");
    for (int k = 0; k < params[i - 1] && at < (int)sizeof line - 32; k++) {
        CUdeviceptr p = *(CUdeviceptr *)kernel_params[k];
        uint64_t off;
        if (find(p, 0, &off) < 0) {
            say("cuLaunchKernel %s -> argument %d outside every allocation", names[i - 1], k);
            return CUDA_ERROR_INVALID_VALUE;
        }
        at += snprintf(line + at, sizeof line - at, " +%llu", (unsigned long long)off);
    }
    say("%s", line);
    long long per_call = 1;
    host_kernel k = find_host_kernel(names[i - 1], &per_call);
    long long threads = (long long)gx * gy * gz * bx * by * bz;
    if (k && threads % per_call != 0) {
        say("cuLaunchKernel %s -> %lld threads: not whole blocks of %lld", names[i - 1], threads, per_call);
        return CUDA_ERROR_LAUNCH_FAILED;
    }
    if (k && run_grid(k, params[i - 1], kernel_params, threads / per_call) != 0) {
        say("cuLaunchKernel %s -> %d arguments: more than the emulation takes", names[i - 1], params[i - 1]);
        return CUDA_ERROR_LAUNCH_FAILED;
    }
    return CUDA_SUCCESS;
}
#endif

CUresult cuStreamSynchronize(void *stream) {
    ENTER("cuStreamSynchronize");
    NEED_CONTEXT("cuStreamSynchronize");
    say("cuStreamSynchronize%s", stream ? " on a stream" : "");
    return CUDA_SUCCESS;
}

CUresult cuGetErrorName(CUresult error, const char **name) {
    switch (error) {
    case CUDA_SUCCESS: *name = "CUDA_SUCCESS"; return CUDA_SUCCESS;
    case CUDA_ERROR_INVALID_VALUE: *name = "CUDA_ERROR_INVALID_VALUE"; return CUDA_SUCCESS;
    case CUDA_ERROR_OUT_OF_MEMORY: *name = "CUDA_ERROR_OUT_OF_MEMORY"; return CUDA_SUCCESS;
    case CUDA_ERROR_NOT_INITIALIZED: *name = "CUDA_ERROR_NOT_INITIALIZED"; return CUDA_SUCCESS;
    case CUDA_ERROR_NO_DEVICE: *name = "CUDA_ERROR_NO_DEVICE"; return CUDA_SUCCESS;
    case CUDA_ERROR_INVALID_CONTEXT: *name = "CUDA_ERROR_INVALID_CONTEXT"; return CUDA_SUCCESS;
    case CUDA_ERROR_NOT_FOUND: *name = "CUDA_ERROR_NOT_FOUND"; return CUDA_SUCCESS;
    case CUDA_ERROR_LAUNCH_FAILED: *name = "CUDA_ERROR_LAUNCH_FAILED"; return CUDA_SUCCESS;
    default: *name = NULL; return CUDA_ERROR_INVALID_VALUE;
    }
}

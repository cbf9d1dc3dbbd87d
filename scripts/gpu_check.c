/*
 * One example on the GPU, for scripts/gpu-check.sh: built with -DMODEL=<name> -DUPPER=<NAME>
 * -DHEADER='"<name>.h"' and linked with lib<name>.a -ldl -lm.
 *
 *   gpu_check ITERS NIN NOUT IN_0.npy ... EXPECTED_0.npy ...
 *
 * Runs the model through its CUDA launcher on the golden inputs, compares every output with the
 * golden output and with the library's own CPU path, then times ITERS runs and ITERS launches of
 * each kernel alone (medians; a kernel's time includes its launch and a stream synchronisation).
 * Exit status: 0 when everything matches, 1 on a mismatch or a driver error, 2 when there is no
 * CUDA driver (or no device), 3 on a usage or file error.
 */
#define _POSIX_C_SOURCE 200809L
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include HEADER

#define CAT2(a, b) a##b
#define CAT(a, b) CAT2(a, b)
#define CTX CAT(MODEL, _cuda_ctx)
#define STR2(x) #x
#define STR(x) STR2(x)
#define NAME STR(MODEL)

#define MAX_TENSORS 64
#define MAX_ITERS 10000

/* The compiled-code tolerance of the test suite (xla-aot/tests/common/mod.rs): 1e-4 relative
 * plus 1e-5 of the output's largest magnitude. */
#define RTOL 1e-4
#define ATOL_OF_MAX 1e-5

struct npy {
    void *data;
    size_t bytes;
    int is_int;
};

static void fail(const char *what, const char *path) {
    fprintf(stderr, "gpu_check: %s: %s\n", path, what);
    exit(3);
}

/* A little-endian float32 or int32 C-order .npy file (what scripts/gen_golden.py writes). */
static struct npy read_npy(const char *path) {
    FILE *f = fopen(path, "rb");
    if (!f) fail("cannot open", path);
    unsigned char head[12];
    if (fread(head, 1, 10, f) != 10 || memcmp(head, "\x93NUMPY", 6) != 0) fail("not a .npy file", path);
    size_t hlen = head[8] | (size_t)head[9] << 8;
    if (head[6] >= 2) {
        if (fread(head + 10, 1, 2, f) != 2) fail("truncated header", path);
        hlen |= (size_t)head[10] << 16 | (size_t)head[11] << 24;
    }
    char *dict = calloc(1, hlen + 1);
    if (!dict || fread(dict, 1, hlen, f) != hlen) fail("truncated header", path);
    struct npy n = {0};
    if (strstr(dict, "'<f4'")) n.is_int = 0;
    else if (strstr(dict, "'<i4'")) n.is_int = 1;
    else fail("dtype is not <f4 or <i4", path);
    if (strstr(dict, "'fortran_order': True")) fail("Fortran order", path);
    free(dict);
    long start = ftell(f);
    fseek(f, 0, SEEK_END);
    n.bytes = (size_t)(ftell(f) - start);
    fseek(f, start, SEEK_SET);
    n.data = malloc(n.bytes ? n.bytes : 1);
    if (!n.data || fread(n.data, 1, n.bytes, f) != n.bytes) fail("truncated data", path);
    fclose(f);
    return n;
}

/* Largest violation of the tolerance (<= 1 passes), or +inf for a NaN mismatch. */
static double worst(const struct npy *expected, const void *actual) {
    size_t n = expected->bytes / 4;
    if (expected->is_int) return memcmp(expected->data, actual, expected->bytes) == 0 ? 0.0 : INFINITY;
    const float *e = expected->data, *a = actual;
    double scale = 0.0;
    for (size_t i = 0; i < n; i++)
        if (isfinite(e[i]) && fabs(e[i]) > scale) scale = fabs(e[i]);
    double w = 0.0;
    for (size_t i = 0; i < n; i++) {
        if (isnan(e[i]) != isnan(a[i])) return INFINITY;
        if (isnan(e[i]) || e[i] == a[i]) continue;
        double r = fabs((double)a[i] - e[i]) / (ATOL_OF_MAX * (scale > 0 ? scale : 1e-30) + RTOL * fabs(e[i]));
        if (r > w) w = r;
    }
    return w;
}

static double now_us(void) {
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return t.tv_sec * 1e6 + t.tv_nsec / 1e3;
}

static int by_value(const void *a, const void *b) {
    double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

static double median(double *v, int n) {
    qsort(v, (size_t)n, sizeof *v, by_value);
    return v[n / 2];
}

static CTX ctx;

static int driver_failed(const char *call, int status) {
    printf("%s: %s failed: %s (status %d)\n", NAME, call, CAT(MODEL, _cuda_error_name)(&ctx), status);
    return status == XLA_AOT_STATUS_NO_CUDA_DRIVER ? 2 : 1;
}

int main(int argc, char **argv) {
    if (argc < 4) fail("usage: gpu_check ITERS NIN NOUT IN.npy... EXPECTED.npy...", "arguments");
    int iters = atoi(argv[1]), nin = atoi(argv[2]), nout = atoi(argv[3]);
    if (iters < 1 || iters > MAX_ITERS || nin < 0 || nout < 1 || nin + nout > MAX_TENSORS || argc != 4 + nin + nout)
        fail("bad counts", "arguments");
    const void *inputs[MAX_TENSORS];
    void *gpu[MAX_TENSORS], *cpu[MAX_TENSORS];
    struct npy expected[MAX_TENSORS];
    for (int k = 0; k < nin; k++) inputs[k] = read_npy(argv[4 + k]).data;
    for (int k = 0; k < nout; k++) {
        expected[k] = read_npy(argv[4 + nin + k]);
        gpu[k] = calloc(1, expected[k].bytes + 1);
        cpu[k] = calloc(1, expected[k].bytes + 1);
    }

    int s = CAT(MODEL, _cuda_init)(&ctx, 0, 0);
    if (s != XLA_AOT_STATUS_OK) {
        int code = driver_failed("init", s);
        if (s == XLA_AOT_STATUS_CUDA_ERROR && strcmp(CAT(MODEL, _cuda_error_name)(&ctx), "CUDA_ERROR_NO_DEVICE") == 0)
            code = 2;
        CAT(MODEL, _cuda_destroy)(&ctx);
        return code;
    }
    s = CAT(MODEL, _cuda_run)(&ctx, NULL, inputs, gpu);
    if (s != XLA_AOT_STATUS_OK) return driver_failed("run", s);

    /* The CPU path of the same library, as a second reference. */
    size_t arena_bytes = CAT(UPPER, _ARENA_SIZE) > 0 ? CAT(UPPER, _ARENA_SIZE) : 64;
    void *arena = aligned_alloc(CAT(UPPER, _ARENA_ALIGN), (arena_bytes + 63) / 64 * 64);
    if (!arena || CAT(MODEL, _run_ptrs)(arena, inputs, cpu) != XLA_AOT_STATUS_OK) fail("the CPU path failed", "run");

    int ok = 1;
    for (int k = 0; k < nout; k++) {
        double vs_golden = worst(&expected[k], gpu[k]);
        struct npy cpu_ref = expected[k];
        cpu_ref.data = cpu[k];
        double vs_cpu = worst(&cpu_ref, gpu[k]);
        int good = vs_golden <= 1.0 && vs_cpu <= 1.0;
        ok &= good;
        printf("%s: output %d: %s (%.3g of the tolerance against the golden output, %.3g against the CPU)\n",
               NAME, k, good ? "matches" : "MISMATCH", vs_golden, vs_cpu);
    }

    static double t[MAX_ITERS];
    for (int i = 0; i < 3; i++) CAT(MODEL, _cuda_run)(&ctx, NULL, inputs, gpu);
    for (int i = 0; i < iters; i++) {
        double t0 = now_us();
        s = CAT(MODEL, _cuda_run)(&ctx, NULL, inputs, gpu);
        t[i] = now_us() - t0;
        if (s != XLA_AOT_STATUS_OK) return driver_failed("run", s);
    }
    printf("%s: run (copies in and out included) %.1f us, median of %d\n", NAME, median(t, iters), iters);
    static const char *const names[] = CAT(UPPER, _CUDA_KERNEL_NAMES);
    static const unsigned blocks[] = CAT(UPPER, _CUDA_KERNEL_BLOCKS);
    for (uint32_t k = 0; k < CAT(UPPER, _CUDA_KERNELS); k++) {
        for (int i = 0; i < iters; i++) {
            double t0 = now_us();
            s = CAT(MODEL, _cuda_run_kernel)(&ctx, NULL, k);
            t[i] = now_us() - t0;
            if (s != XLA_AOT_STATUS_OK) return driver_failed("run_kernel", s);
        }
        printf("  kernel %2u %-40s %6u blocks %9.1f us\n", k, names[k], blocks[k], median(t, iters));
    }
    CAT(MODEL, _cuda_destroy)(&ctx);
    return ok ? 0 : 1;
}

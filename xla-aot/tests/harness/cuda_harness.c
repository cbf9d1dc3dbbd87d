/*
 * Drives a model's CUDA launcher, built with -DMODEL=<name> -DHEADER='"<name>.h"'
 * -DDEVICE_BYTES=<NAME>_CUDA_DEVICE_BYTES and linked with lib<name>.a -ldl:
 *
 *   cuda_harness MODE NIN NOUT IN_BYTES_0 ... OUT_BYTES_0 ...
 *   cuda_harness io NIN NOUT IN_0 BYTES_0 ... OUT_0 BYTES_0 ...
 *
 * MODE run: checks the statuses of a context that was never initialised, then init, two runs,
 * one run_kernel, an out-of-range run_kernel, destroy twice. MODE own-arena: the same, with a
 * device arena the app allocated through the driver itself. Input k is filled with the byte k+1.
 * Prints one line per call: "<call> -> <status> <error name>". When init fails it prints that
 * line, destroys the context and exits 0: the test reads what it printed. Exit status 3 when a
 * status contradicts the C API. MODE io reads each input file, runs once and writes each output
 * file (exit status 1 on any failure).
 */
#include <dlfcn.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include HEADER

#define CAT2(a, b) a##b
#define CAT(a, b) CAT2(a, b)
#define CTX CAT(MODEL, _cuda_ctx)
#define INIT CAT(MODEL, _cuda_init)
#define RUN CAT(MODEL, _cuda_run)
#define RUN_KERNEL CAT(MODEL, _cuda_run_kernel)
#define DESTROY CAT(MODEL, _cuda_destroy)
#define ERROR_NAME CAT(MODEL, _cuda_error_name)

#define MAX_TENSORS 64

static int report(const char *call, int status, CTX *ctx) {
    printf("%s -> %d %s\n", call, status, ERROR_NAME(ctx));
    return status;
}

static void expect(int got, int want, const char *what) {
    if (got != want) {
        fprintf(stderr, "%s: status %d, expected %d\n", what, got, want);
        exit(3);
    }
}

/* A device arena allocated by the app through the driver (what a caller of init with a non-zero
 * device_arena does). */
static uint64_t own_arena(size_t bytes) {
    void *h = dlopen("libcuda.so.1", RTLD_NOW);
    if (!h) { fprintf(stderr, "own-arena: no driver\n"); exit(2); }
    int (*init)(unsigned) = (int (*)(unsigned))dlsym(h, "cuInit");
    int (*retain)(void **, int) = (int (*)(void **, int))dlsym(h, "cuDevicePrimaryCtxRetain");
    int (*push)(void *) = (int (*)(void *))dlsym(h, "cuCtxPushCurrent_v2");
    int (*pop)(void **) = (int (*)(void **))dlsym(h, "cuCtxPopCurrent_v2");
    int (*alloc)(uint64_t *, size_t) = (int (*)(uint64_t *, size_t))dlsym(h, "cuMemAlloc_v2");
    void *c = NULL;
    uint64_t p = 0;
    if (init(0) || retain(&c, 0) || push(c) || alloc(&p, bytes) || pop(&c)) {
        fprintf(stderr, "own-arena: the driver refused\n");
        exit(2);
    }
    return p;
}

static void *slurp(const char *path, size_t n) {
    void *b = malloc(n ? n : 1);
    FILE *f = fopen(path, "rb");
    if (!b || !f || fread(b, 1, n, f) != n) { fprintf(stderr, "cannot read %zu bytes from %s\n", n, path); exit(2); }
    fclose(f);
    return b;
}

/* MODE io: inputs from files, one run, outputs to files. */
static int io(int nin, int nout, char **files) {
    const void *inputs[MAX_TENSORS];
    void *outputs[MAX_TENSORS];
    for (int k = 0; k < nin; k++) inputs[k] = slurp(files[2 * k], (size_t)atol(files[2 * k + 1]));
    for (int k = 0; k < nout; k++) outputs[k] = calloc(1, (size_t)atol(files[2 * (nin + k) + 1]) + 1);
    static CTX ctx;
    int s = INIT(&ctx, 0, 0);
    if (s == XLA_AOT_STATUS_OK) s = RUN(&ctx, NULL, inputs, outputs);
    if (s != XLA_AOT_STATUS_OK) {
        fprintf(stderr, "status %d: %s\n", s, ERROR_NAME(&ctx));
        DESTROY(&ctx);
        return 1;
    }
    DESTROY(&ctx);
    for (int k = 0; k < nout; k++) {
        const char *path = files[2 * (nin + k)];
        size_t n = (size_t)atol(files[2 * (nin + k) + 1]);
        FILE *f = fopen(path, "wb");
        if (!f || fwrite(outputs[k], 1, n, f) != n) { fprintf(stderr, "cannot write %s\n", path); return 2; }
        fclose(f);
    }
    return 0;
}

int main(int argc, char **argv) {
    if (argc < 4) { fprintf(stderr, "usage: %s MODE NIN NOUT BYTES...\n", argv[0]); return 2; }
    if (strcmp(argv[1], "io") == 0) {
        int nin = atoi(argv[2]), nout = atoi(argv[3]);
        if (nin < 0 || nout < 0 || nin + nout > MAX_TENSORS || argc != 4 + 2 * (nin + nout)) return 2;
        return io(nin, nout, argv + 4);
    }
    const char *mode = argv[1];
    int nin = atoi(argv[2]), nout = atoi(argv[3]);
    if (nin < 0 || nout < 0 || nin + nout > MAX_TENSORS || argc != 4 + nin + nout) {
        fprintf(stderr, "bad tensor counts\n");
        return 2;
    }
    const void *inputs[MAX_TENSORS];
    void *outputs[MAX_TENSORS];
    for (int k = 0; k < nin + nout; k++) {
        size_t n = (size_t)atol(argv[4 + k]);
        unsigned char *b = malloc(n ? n : 1);
        if (!b) return 2;
        memset(b, k < nin ? k + 1 : 0, n);
        if (k < nin) inputs[k] = b; else outputs[k - nin] = b;
    }
    static CTX ctx; /* zeroed: never initialised */
    expect(report("run before init", RUN(&ctx, NULL, inputs, outputs), &ctx),
           XLA_AOT_STATUS_BAD_ARGUMENT, "run before init");
    expect(RUN(NULL, NULL, inputs, outputs), XLA_AOT_STATUS_NULL_POINTER, "run(NULL)");
    expect(INIT(NULL, 0, 0), XLA_AOT_STATUS_NULL_POINTER, "init(NULL)");
    uint64_t arena = strcmp(mode, "own-arena") == 0 ? own_arena(DEVICE_BYTES) : 0;
    int s = report("init", INIT(&ctx, 0, arena), &ctx);
    if (s != XLA_AOT_STATUS_OK) {
        DESTROY(&ctx);
        DESTROY(&ctx);
        printf("destroyed\n");
        return 0;
    }
    expect(RUN(&ctx, NULL, inputs, NULL), XLA_AOT_STATUS_NULL_POINTER, "run with null outputs");
    if (nin > 0) {
        const void *saved = inputs[0];
        inputs[0] = NULL;
        expect(RUN(&ctx, NULL, inputs, outputs), XLA_AOT_STATUS_NULL_POINTER, "run with a null input");
        inputs[0] = saved;
    }
    for (int r = 0; r < 2; r++) {
        if (report("run", RUN(&ctx, NULL, inputs, outputs), &ctx) != XLA_AOT_STATUS_OK) {
            DESTROY(&ctx);
            printf("destroyed\n");
            return 0;
        }
    }
    report("run_kernel 0", RUN_KERNEL(&ctx, NULL, 0), &ctx);
    expect(report("run_kernel out of range", RUN_KERNEL(&ctx, NULL, 1u << 30), &ctx),
           XLA_AOT_STATUS_BAD_ARGUMENT, "run_kernel out of range");
    DESTROY(&ctx);
    DESTROY(&ctx);
    expect(report("run after destroy", RUN(&ctx, NULL, inputs, outputs), &ctx),
           XLA_AOT_STATUS_BAD_ARGUMENT, "run after destroy");
    printf("destroyed\n");
    return 0;
}

/*
 * Profiler-hook harness for a compiled xla-aot model, built with -DMODEL=<name> and linked with
 * lib<name>.a.
 *
 *   profiler KERNELS ARENA_SIZE NIN NOUT IN_0 BYTES_0 ... OUT_0 BYTES_0 ...
 *
 * Registers a profiler hook (<name>_set_profiler) that records every (kernel, phase) it is
 * called with, runs the model once and checks the record is exactly (0, 0), (0, 1), (1, 0), ...,
 * (KERNELS - 1, 1), with the context pointer passed back each time; then unregisters it and
 * checks a second run calls nothing and gives bit-identical outputs. Prints "events: N".
 * Exit status: 0 on success, 2 on a usage or I/O error, 3 on a violated contract.
 */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "xla_aot_runtime.h"

#define CAT2(a, b) a##b
#define CAT(a, b) CAT2(a, b)
#define RUN_PTRS CAT(MODEL, _run_ptrs)
#define SET_PROFILER CAT(MODEL, _set_profiler)

int RUN_PTRS(void *arena, const void *const *inputs, void *const *outputs);
void SET_PROFILER(XlaAotProfiler hook, void *ctx);

#define MAX_TENSORS 64
#define MAX_EVENTS 4096

struct record {
    int n;
    int bad_ctx;
    uint32_t kernel[MAX_EVENTS], phase[MAX_EVENTS];
};

static struct record rec;

static void hook(void *ctx, uint32_t kernel, uint32_t phase) {
    if (ctx != &rec) rec.bad_ctx = 1;
    if (rec.n < MAX_EVENTS) {
        rec.kernel[rec.n] = kernel;
        rec.phase[rec.n] = phase;
    }
    rec.n++;
}

#define EXPECT(cond, what) do { if (!(cond)) { fprintf(stderr, "contract violated: %s\n", what); return 3; } } while (0)

int main(int argc, char **argv) {
    if (argc < 5) { fprintf(stderr, "usage\n"); return 2; }
    int kernels = atoi(argv[1]);
    size_t arena_size = strtoull(argv[2], NULL, 10);
    int nin = atoi(argv[3]), nout = atoi(argv[4]);
    if (nin > MAX_TENSORS || nout > MAX_TENSORS || argc != 5 + 2 * (nin + nout) || 2 * kernels > MAX_EVENTS) {
        fprintf(stderr, "usage\n");
        return 2;
    }
    const void *inputs[MAX_TENSORS];
    void *outputs[MAX_TENSORS], *first[MAX_TENSORS];
    size_t out_bytes[MAX_TENSORS];
    for (int i = 0; i < nin; i++) {
        size_t n = strtoull(argv[6 + 2 * i], NULL, 10);
        void *buf = malloc(n + 1);
        FILE *f = fopen(argv[5 + 2 * i], "rb");
        if (!buf || !f || fread(buf, 1, n, f) != n) { fprintf(stderr, "cannot read input\n"); return 2; }
        fclose(f);
        inputs[i] = buf;
    }
    for (int i = 0; i < nout; i++) {
        out_bytes[i] = strtoull(argv[6 + 2 * (nin + i)], NULL, 10);
        outputs[i] = calloc(1, out_bytes[i] + 1);
        first[i] = calloc(1, out_bytes[i] + 1);
    }
    void *arena = aligned_alloc(64, arena_size / 64 * 64 + 64);
    SET_PROFILER(hook, &rec);
    EXPECT(RUN_PTRS(arena, inputs, (void *const *)outputs) == 0, "run succeeds");
    EXPECT(!rec.bad_ctx, "the hook gets the registered context");
    EXPECT(rec.n == 2 * kernels, "two calls per kernel");
    for (int i = 0; i < rec.n; i++) {
        EXPECT(rec.kernel[i] == (uint32_t)(i / 2) && rec.phase[i] == (uint32_t)(i % 2),
               "kernels in manifest order, before then after");
    }
    for (int i = 0; i < nout; i++) memcpy(first[i], outputs[i], out_bytes[i]);
    SET_PROFILER(NULL, NULL);
    int events = rec.n;
    EXPECT(RUN_PTRS(arena, inputs, (void *const *)outputs) == 0, "run succeeds");
    EXPECT(rec.n == events, "no call once unregistered");
    for (int i = 0; i < nout; i++) {
        EXPECT(memcmp(first[i], outputs[i], out_bytes[i]) == 0, "profiling changes no bit");
        FILE *f = fopen(argv[5 + 2 * (nin + i)], "wb");
        if (!f || fwrite(outputs[i], 1, out_bytes[i], f) != out_bytes[i]) { fprintf(stderr, "cannot write\n"); return 2; }
        fclose(f);
    }
    printf("events: %d\n", events);
    return 0;
}
